// strata/communicator/tcp.hpp — the TCP communicator: ranks in separate processes or hosts.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include <strata/algorithms/all_gather_ring.hpp>
#include <strata/algorithms/all_reduce_halving_doubling.hpp>
#include <strata/algorithms/all_reduce_recursive_doubling.hpp>
#include <strata/algorithms/all_reduce_ring.hpp>
#include <strata/algorithms/barrier_dissemination.hpp>
#include <strata/algorithms/broadcast_ring.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/algorithms/reduce_ring.hpp>
#include <strata/algorithms/reduce_scatter_ring.hpp>
#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/resolve.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/form_mesh.hpp>
#include <strata/transport/tcp/group.hpp>
#include <strata/transport/tcp/link.hpp>
#include <strata/transport/tcp/route.hpp>

namespace strata::communicator {

static_assert(algorithms::MessageLink<transport::tcp::Link>);

/// Which all-reduce algorithm the TCP communicator runs (TF's CommunicationImplementation:
/// AUTO picks by message size, RING forces the ring).
enum class TcpAllReduce : std::uint8_t {
  automatic,           ///< recursive doubling while small (see small_message_bytes), ring above
  ring,                ///< pipelined ring: bandwidth-optimal
  recursive_doubling,  ///< ⌈log2 n⌉ rounds: latency-optimal
  halving_doubling,    ///< recursive halving, then doubling: the ring's bytes in 2·log2 n hops
};

}  // namespace strata::communicator

template <>
struct strata::EnumNames<strata::communicator::TcpAllReduce> {
  static constexpr std::array<std::string_view, 4> kNames{"automatic", "ring", "recursive_doubling",
                                                          "halving_doubling"};
};

namespace strata::communicator {

using strata::to_string;

/// Tunables of the TCP communicator. Every rank must use the same values for the first four
/// (the handshake refuses ranks that differ: they would cut messages differently).
struct TcpOptions {
  /// Largest message: pipelined algorithms cut buffers into segments of this size.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  /// Data connections between each pair of ranks; segments are spread over them.
  int connections_per_peer = 1;
  TcpAllReduce all_reduce = TcpAllReduce::automatic;
  /// `automatic` runs recursive doubling while S·⌈log2 n⌉·(n−1), for S bytes on n ranks, is
  /// at most this; the ring above. Recursive doubling takes fewer hops but its busiest rank
  /// sends S·⌈log2 n⌉ bytes, the ring's 2·S·(n−1)/n, and the group as a whole sends and adds
  /// n·S·⌈log2 n⌉: where ranks share cores that total is what costs, so the crossover falls
  /// faster than the bytes per rank. The default puts the switch at 512, 128 and 85 KiB for
  /// 2, 3 and 4 ranks, where it was measured on loopback (docs/performance.md).
  std::size_t small_message_bytes = 512 * 1024;
  /// A call that sends at least this many bytes lends its buffers' pages to the kernel
  /// instead of copying them into socket buffers (messages of 64 KiB and more; see
  /// transport/tcp/lending.hpp): one copy per byte fewer, but pages pinned, a pipe per connection
  /// and a release from the receiver per message. Whether that pays depends on the machine
  /// (faster on some, slower on others: docs/performance.md), so strata copies unless told:
  /// measure with `strata-perf --lend-from`.
  /// 0 lends every large message; SIZE_MAX (the default) none.
  std::size_t lend_from_bytes = SIZE_MAX;
  /// SO_SNDBUF and SO_RCVBUF of data connections; 0 leaves the kernel's autotuning on.
  int socket_buffer_bytes = 0;
  /// TCP_NODELAY: small messages leave at once instead of waiting to be coalesced.
  bool no_delay = true;
  /// TCP congestion control of every connection (TCP_CONGESTION), e.g. "cubic" or "bbr"; the
  /// kernel must allow it (net.ipv4.tcp_allowed_congestion_control). Unset: "reno" between
  /// ranks on one host, where loopback never queues or drops and a pacing algorithm (a
  /// host-wide "bbr") would only throttle, and the kernel's default between hosts.
  std::optional<std::string> congestion_control{};
  /// Shared secret proving membership (HMAC challenge–response in the handshake; it never
  /// crosses the wire). Unset: STRATA_CLUSTER_TOKEN when set, else no authentication.
  std::optional<std::string> cluster_token{};
};

/// Who is in the group and where each rank listens.
struct TcpMembership {
  int rank = 0;
  /// Every rank's listening address, in rank order (e.g. ClusterSpec::collective_addresses()).
  std::vector<cluster::Address> addresses;
  /// Identity of the cluster, equal on every rank (ClusterSpec::fingerprint()); 0 derives one
  /// from `addresses`.
  std::uint64_t cluster_fingerprint = 0;
  /// A listening socket already bound to addresses[rank], adopted by the communicator; -1
  /// binds one.
  int listen_fd = -1;
};

/// The membership of this process's collective group as `resolve_cluster()` found it; takes
/// over the listening socket the resolver bound, if any.
/// @throws ConfigurationError for a task outside the collective group (ps, evaluator).
inline TcpMembership membership_of(cluster::ResolvedCluster& resolved) {
  if (!resolved.in_collective_group())
    throw ConfigurationError(-1, "TcpCommunicator",
                             fmt::format("task {} {} is not a member of the collective group",
                                         to_string(resolved.task.type), resolved.task.index),
                             "run collectives on the chief and worker tasks only");
  TcpMembership membership;
  membership.rank = resolved.rank;
  membership.addresses = resolved.addresses;
  membership.cluster_fingerprint = resolved.cluster.empty() ? 0 : resolved.cluster.fingerprint();
  membership.listen_fd = resolved.listener.release();
  return membership;
}

/// One rank of a group that communicates over TCP: one process (or thread) per rank, on one
/// host or many.
///
/// Construction forms the group (transport/tcp/form_mesh.hpp): every rank connects to every
/// other, in any start order, within the deadline. Collectives then run pipelined algorithms
/// over those connections: ring all-reduce (recursive doubling for small messages),
/// ring broadcast, reduce, all-gather and reduce-scatter, dissemination barrier. Each message
/// carries the sender's view of the call, so ranks that disagree on count, type, op, root or
/// the number of calls raise MismatchError instead of exchanging garbage.
///
/// Failure semantics: a peer that dies makes every rank raise PeerFailureError naming it within
/// milliseconds; a peer that stalls makes every rank raise TimeoutError at the deadline naming
/// the silent rank; any failure fails the whole group, and later calls refuse with the first
/// failure's reason. Re-create the communicators to continue.
///
/// Example (every process):
/// @code
///   strata::communicator::TcpCommunicator comm({.rank = r, .addresses = addresses});
///   comm.all_reduce(std::span(gradients), strata::ReduceOp::mean);
/// @endcode
class TcpCommunicator : public detail::CollectiveApi<TcpCommunicator> {
  friend class detail::CollectiveApi<TcpCommunicator>;

 public:
  static constexpr std::string_view kName = "tcp";
  static constexpr int kMaxSize = std::numeric_limits<int>::max();
  /// `create(n)` makes all n ranks in this process (loopback); other processes join through
  /// the constructor, with the membership their resolver found.
  static constexpr bool kSpansProcesses = false;

  /// Joins the group described by `membership`. Blocks until every rank has joined.
  /// @throws ConfigurationError for bad options or addresses (port in use, not this host's
  /// address, peers with other settings or token); TimeoutError listing the ranks that did
  /// not join by the deadline; UsageError for a rank outside the group.
  explicit TcpCommunicator(TcpMembership membership, TcpOptions tcp = {},
                           CommunicatorOptions options = {})
      : state_(std::make_unique<State>(options, tcp)) {
    const int size = static_cast<int>(membership.addresses.size());
    try {
      if (size < 1 || membership.rank < 0 || membership.rank >= size)
        throw UsageError(
            membership.rank, "TcpCommunicator",
            fmt::format("rank {} is not in a group of {} addresses", membership.rank, size),
            "pass every rank's address and a rank in [0, addresses.size())");
      validate(tcp, membership.rank);
    } catch (...) {
      // The listening socket is this communicator's once passed: refusing must not leak it.
      if (membership.listen_fd >= 0) ::close(membership.listen_fd);
      throw;
    }
    transport::tcp::MeshConfig config;
    config.rank = membership.rank;
    config.addresses = std::move(membership.addresses);
    config.cluster = membership.cluster_fingerprint != 0 ? membership.cluster_fingerprint
                                                         : fingerprint_of(config.addresses);
    config.tunables = tunables_hash(tcp);
    config.data_connections = tcp.connections_per_peer;
    config.token = tcp.cluster_token ? tcp.cluster_token : token_from_environment();
    config.socket_buffer_bytes = tcp.socket_buffer_bytes;
    config.no_delay = tcp.no_delay;
    config.congestion_control = tcp.congestion_control;
    config.listen_fd = membership.listen_fd;
    auto mesh = transport::tcp::form_mesh(config, Deadline::after(options.timeout));
    state_->group = std::make_unique<transport::tcp::Group>(
        std::move(mesh), static_cast<std::uint32_t>(tcp.chunk_bytes), tcp.lend_from_bytes);
  }

  /// A group of `size` ranks in this process, on loopback ports chosen by the kernel; element
  /// r is rank r. For tests and benchmarks: drive each rank from its own thread.
  static std::vector<TcpCommunicator> create(int size, CommunicatorOptions options = {},
                                             TcpOptions tcp = {}) {
    if (size < 1)
      throw UsageError(-1, "TcpCommunicator::create",
                       fmt::format("a group needs at least one rank, got size {}", size),
                       "pass the number of ranks");
    std::vector<cluster::Address> addresses;
    std::vector<int> fds;
    for (int r = 0; r < size; ++r) {
      auto listener = transport::tcp::listen_on_loopback();
      addresses.push_back(listener.address);
      fds.push_back(listener.fd);
    }
    std::vector<std::optional<TcpCommunicator>> slots(static_cast<std::size_t>(size));
    std::vector<std::exception_ptr> failures(static_cast<std::size_t>(size));
    {
      std::vector<std::jthread> threads;
      for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] {
          const auto i = static_cast<std::size_t>(r);
          try {
            slots[i].emplace(TcpMembership{r, addresses, 0, fds[i]}, tcp, options);
          } catch (...) {
            failures[i] = std::current_exception();
          }
        });
    }
    for (auto& failure : failures)
      if (failure) std::rethrow_exception(failure);
    std::vector<TcpCommunicator> group;
    group.reserve(slots.size());
    for (auto& slot : slots)
      group.push_back(std::move(*slot));
    return group;
  }

  TcpCommunicator(TcpCommunicator&&) noexcept = default;
  TcpCommunicator& operator=(TcpCommunicator&&) noexcept = default;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;
  /// Waits for pending asynchronous calls, then tells the peers this rank is done.
  ~TcpCommunicator() = default;

  int rank() const noexcept { return state_->group->rank(); }
  int size() const noexcept { return state_->group->size(); }
  const CommunicatorOptions& options() const noexcept { return state_->options; }
  const TcpOptions& tcp_options() const noexcept { return state_->tcp; }

  // all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier and their _async twins
  // come from detail::CollectiveApi (communicator/detail/collective_api.hpp).

  /// Fails the whole group from any thread: every pending and later call on every rank throws
  /// PeerFailureError carrying `reason`.
  void abort(std::string_view reason) noexcept {
    state_->group->fail(
        transport::tcp::FailureClass::peer_failure,
        fmt::format("strata: rank {}: abort: rank {} aborted: {}", rank(), rank(), reason));
  }

 private:
  struct State {
    State(const CommunicatorOptions& o, const TcpOptions& t) : options(o), tcp(t) {}
    CommunicatorOptions options;
    TcpOptions tcp;
    std::unique_ptr<transport::tcp::Group> group;
    detail::SerialExecutor executor;  // last: destroyed first, finishing queued calls
  };

  static void validate(const TcpOptions& tcp, int rank) {
    auto bad = [&](std::string_view what, std::string_view todo) {
      throw ConfigurationError(rank, "TcpOptions", what, todo);
    };
    if (tcp.chunk_bytes < 64 || tcp.chunk_bytes > (std::size_t{1} << 30))
      bad(fmt::format("chunk_bytes {} is outside [64, 2^30]", tcp.chunk_bytes),
          "use a chunk of 64 bytes to 1 GiB (default 1 MiB)");
    if (tcp.connections_per_peer < 1 || tcp.connections_per_peer > 64)
      bad(fmt::format("connections_per_peer {} is outside [1, 64]", tcp.connections_per_peer),
          "use 1 to 64 connections per peer");
    if (tcp.socket_buffer_bytes < 0)
      bad(fmt::format("socket_buffer_bytes {} is negative", tcp.socket_buffer_bytes),
          "use 0 (kernel default) or a positive size");
    if (tcp.congestion_control &&
        (tcp.congestion_control->empty() || tcp.congestion_control->size() >= 16 ||
         tcp.congestion_control->find('\0') != std::string::npos))
      bad(fmt::format("congestion_control '{}' is not a congestion control name",
                      *tcp.congestion_control),
          "name one listed in /proc/sys/net/ipv4/tcp_allowed_congestion_control (at most 15 "
          "characters), or leave it unset");
    if (tcp.cluster_token && tcp.cluster_token->empty())
      bad("cluster_token is empty: anyone could compute its MACs",
          "set a secret shared by every rank, or leave it unset for no authentication");
    if (tcp.all_reduce > TcpAllReduce::halving_doubling)
      bad("all_reduce is not a TcpAllReduce value",
          "use automatic, ring, recursive_doubling or halving_doubling");
  }

  static std::optional<std::string> token_from_environment() {
    return environment_variable("STRATA_CLUSTER_TOKEN");
  }

  static std::uint64_t fnv1a(std::uint64_t hash, std::string_view text) noexcept {
    for (char c : text) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ULL;
    }
    return hash;
  }

  static std::uint64_t fingerprint_of(const std::vector<cluster::Address>& addresses) {
    std::uint64_t hash = 0xcbf29ce484222325ULL;
    for (const auto& address : addresses)
      hash = fnv1a(hash, address.to_string() + ",");
    return hash == 0 ? 1 : hash;
  }

  static std::uint64_t tunables_hash(const TcpOptions& tcp) {
    return fnv1a(0xcbf29ce484222325ULL,
                 fmt::format("{}/{}/{}/{}", tcp.chunk_bytes, tcp.connections_per_peer,
                             to_string(tcp.all_reduce), tcp.small_message_bytes));
  }

  [[noreturn]] void fail_usage(Collective kind, std::string_view what,
                               std::string_view what_to_do) {
    UsageError error(rank(), to_string(kind), what, what_to_do);
    // The peers are about to wait for this rank: fail the group so they learn why at once.
    state_->group->fail(transport::tcp::FailureClass::peer_failure, error.what());
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    state_->executor.drain();  // keep call order with earlier asynchronous calls
    execute(*state_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    auto work = std::make_shared<detail::WorkState>();
    State* state = state_.get();
    state->executor.post([state, call, options, work] {
      try {
        execute(*state, call, options);
        work->complete();
      } catch (...) {
        work->complete(std::current_exception());
      }
    });
    return Work(std::move(work));
  }

  static void execute(State& state, const CollectiveCall& call, const CallOptions& options) {
    auto& group = *state.group;
    if (group.failed()) group.raise_failure(to_string(call.kind));
    transport::tcp::Link link(group, call,
                              Deadline::after(options.timeout.value_or(state.options.timeout)));
    try {
      switch (call.kind) {
        case Collective::all_reduce:
          switch (all_reduce_algorithm(state.tcp, call, group.size())) {
            case TcpAllReduce::recursive_doubling:
              algorithms::AllReduceRecursiveDoubling::run(link, call);
              break;
            case TcpAllReduce::halving_doubling:
              algorithms::AllReduceHalvingDoubling::run(link, call);
              break;
            case TcpAllReduce::automatic:  // all_reduce_algorithm decided
            case TcpAllReduce::ring:
              algorithms::AllReduceRing::run(link, call);
              break;
          }
          break;
        case Collective::broadcast:
          algorithms::BroadcastRing::run(link, call);
          break;
        case Collective::reduce:
          algorithms::ReduceRing::run(link, call);
          break;
        case Collective::all_gather:
          algorithms::AllGatherRing::run(link, call);
          break;
        case Collective::reduce_scatter:
          algorithms::ReduceScatterRing::run(link, call);
          break;
        case Collective::barrier:
          algorithms::BarrierDissemination::run(link, call);
          break;
      }
    } catch (...) {
      group.fail(std::current_exception());
      throw;
    }
  }

  static TcpAllReduce all_reduce_algorithm(const TcpOptions& tcp, const CollectiveCall& call,
                                           int size) noexcept {
    if (tcp.all_reduce != TcpAllReduce::automatic) return tcp.all_reduce;
    // S·⌈log2 size⌉·(size−1) ≤ small_message_bytes, without overflowing.
    const auto rounds = std::max<std::size_t>(1, std::bit_width(static_cast<unsigned>(size) - 1));
    const auto factor = rounds * static_cast<std::size_t>(std::max(1, size - 1));
    return call.count * size_of(call.type) <= tcp.small_message_bytes / factor
               ? TcpAllReduce::recursive_doubling
               : TcpAllReduce::ring;
  }

  std::unique_ptr<State> state_;
};

}  // namespace strata::communicator
