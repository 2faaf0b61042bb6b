// strata/communicator/tcp.hpp — the TCP communicator: ranks in separate processes or hosts.
//
// This header declares; the definitions (and the TCP transport under them) are in
// communicator/impl/tcp.ipp, compiled into every unit header-only or once into the
// strata::compiled library (config.hpp: STRATA_SEPARATE_COMPILATION).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <strata/cluster/address.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/shared_buffer.hpp>
#include <strata/communicator/work.hpp>
#include <strata/config.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/enum_names.hpp>

namespace strata::cluster {
struct ResolvedCluster;  // cluster/resolve.hpp
}  // namespace strata::cluster

namespace strata::communicator {

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
/// and `shared_memory` (the handshake refuses ranks that differ: they would cut messages
/// differently).
struct TcpOptions {
  /// Largest message: pipelined algorithms cut buffers into segments of this size. Through
  /// shared memory, ranks stage half of it at a time (at least 32 KiB, at most 16 MiB).
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
  /// Ranks the handshake finds on one host (same boot, same network namespace) move their
  /// data through shared memory instead of loopback TCP, when all of the group's ranks are
  /// there; false keeps every byte on TCP. The TCP connections stay either way: they
  /// authenticate the ranks, hand the memory over and tell when a peer dies.
  bool shared_memory = true;
  /// With shared memory, each rank of a host gets an arena of this many bytes (rounded up to
  /// pages) in the region, for `allocate_shared`: an all-reduce whose buffers all lie in the
  /// arenas is reduced in place by the processes, with no staging copy. Pages are only taken
  /// as they are written. 0 (the default): no arena.
  std::size_t shared_buffer_bytes = 0;
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
STRATA_DECL TcpMembership membership_of(cluster::ResolvedCluster& resolved);

/// One rank of a group that communicates over TCP: one process (or thread) per rank, on one
/// host or many.
///
/// Construction forms the group (transport/tcp/form_mesh.hpp): every rank connects to every
/// other, in any start order, within the deadline. Collectives then run pipelined algorithms
/// over those connections: ring all-reduce (recursive doubling for small messages),
/// ring broadcast, reduce, all-gather and reduce-scatter, dissemination barrier. When every
/// rank runs on one host, they move data through a shared region instead
/// (transport/shm/collectives.hpp; TcpOptions::shared_memory). Each message
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
  friend struct detail::CallAccess;

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
  STRATA_DECL explicit TcpCommunicator(TcpMembership membership, TcpOptions tcp = {},
                                       CommunicatorOptions options = {});

  /// A group of `size` ranks in this process, on loopback ports chosen by the kernel; element
  /// r is rank r. For tests and benchmarks: drive each rank from its own thread.
  STRATA_DECL static std::vector<TcpCommunicator> create(int size, CommunicatorOptions options = {},
                                                         TcpOptions tcp = {});

  STRATA_DECL TcpCommunicator(TcpCommunicator&&) noexcept;
  STRATA_DECL TcpCommunicator& operator=(TcpCommunicator&&) noexcept;
  TcpCommunicator(const TcpCommunicator&) = delete;
  TcpCommunicator& operator=(const TcpCommunicator&) = delete;
  /// Waits for pending asynchronous calls, then tells the peers this rank is done.
  STRATA_DECL ~TcpCommunicator();

  STRATA_DECL int rank() const noexcept;
  STRATA_DECL int size() const noexcept;
  STRATA_DECL const CommunicatorOptions& options() const noexcept;
  STRATA_DECL const TcpOptions& tcp_options() const noexcept;
  /// Whether collectives move data through shared memory (TcpOptions::shared_memory, and
  /// every rank on this host), rather than over TCP.
  STRATA_DECL bool uses_shared_memory() const noexcept;
  /// `bytes` of this rank's arena (TcpOptions::shared_buffer_bytes), for the buffers of its
  /// collectives: an all-reduce for which every co-located rank passes such buffers (send and
  /// recv, or one in place) runs on them in place, as threads do. Ordinary memory where this
  /// rank shares memory with nobody (uses_shared_memory() is false). Any thread may allocate.
  /// @throws ConfigurationError when the arena has no free range of `bytes`.
  STRATA_DECL SharedBuffer allocate_shared(std::size_t bytes);

  // all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier and their _async twins
  // come from detail::CollectiveApi (communicator/detail/collective_api.hpp).

  /// Fails the whole group from any thread: every pending and later call on every rank throws
  /// PeerFailureError carrying `reason`.
  STRATA_DECL void abort(std::string_view reason) noexcept;
  /// Fails the whole group from any thread because of `error`: every rank raises its root
  /// cause, with its error type (see fail_group).
  STRATA_DECL void fail(const std::exception_ptr& error) noexcept;
  /// Reads, without waiting, what the peers said on their control connections: raises (and
  /// fails the group) when a peer closed its connections or failed the group. For a caller
  /// that waits on something else between calls (NcclCommunicator watches its side group
  /// with it); not while a call of this communicator runs on another thread.
  STRATA_DECL void check_peers();

 private:
  struct State;  // communicator/impl/tcp.ipp

  [[noreturn]] STRATA_DECL void fail_usage(Collective kind, std::string_view what,
                                           std::string_view what_to_do);
  STRATA_DECL void run(const CollectiveCall& call, const CallOptions& options);
  STRATA_DECL Work submit(const CollectiveCall& call, const CallOptions& options);
  STRATA_DECL static void execute(State& state, const CollectiveCall& call,
                                  const CallOptions& options);
  STRATA_DECL static void execute_shared(State& state, const CollectiveCall& call,
                                         const Deadline& deadline);
  STRATA_DECL static void execute_across_hosts(State& state, const CollectiveCall& call,
                                               const Deadline& deadline);
  STRATA_DECL void share_memory(const CommunicatorOptions& options);

  std::unique_ptr<State> state_;
};

}  // namespace strata::communicator

#if STRATA_HEADER_ONLY
#include <strata/communicator/impl/tcp.ipp>
#endif
