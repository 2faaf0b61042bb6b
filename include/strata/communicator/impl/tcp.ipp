// strata/communicator/impl/tcp.ipp — TcpCommunicator's definitions over the TCP transport.
// Included at the end of communicator/tcp.hpp (header-only) or by impl/src.hpp after it
// (compiled), never on its own.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <exception>
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
#include <strata/cluster/resolve.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/detail/fnv1a.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/shm/arena.hpp>
#include <strata/transport/shm/group.hpp>
#include <strata/transport/tcp/control.hpp>
#include <strata/transport/tcp/form_mesh.hpp>
#include <strata/transport/tcp/group.hpp>
#include <strata/transport/tcp/link.hpp>
#include <strata/transport/tcp/route.hpp>

namespace strata::communicator {

static_assert(algorithms::MessageLink<transport::tcp::Link>);

struct TcpCommunicator::State {
  State(const CommunicatorOptions& o, const TcpOptions& t) : options(o), tcp(t) {}
  CommunicatorOptions options;
  TcpOptions tcp;
  std::unique_ptr<transport::tcp::Group> group;
  // The region of this host's ranks; null when shared memory is off or this rank is alone.
  std::shared_ptr<transport::shm::Group> shm;
  // This rank's arena of the region, when TcpOptions::shared_buffer_bytes asked for one.
  std::shared_ptr<transport::shm::Arena> arena;
  std::uint64_t shm_calls = 0;  // calls on the region, numbered alike by the host's ranks
  // When the group spans hosts and some share one: each host's ranks, ascending, hosts in the
  // order of their lowest rank; empty otherwise.
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;         // rank -> index in hosts
  std::vector<std::byte> staging;   // what the stages between hosts keep
  detail::SerialExecutor executor;  // last: destroyed first, finishing queued calls
};

namespace detail::tcp_communicator {

inline void validate(const TcpOptions& tcp, int rank) {
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
  if (tcp.shared_buffer_bytes > (std::size_t{1} << 40))
    bad(fmt::format("shared_buffer_bytes {} is over 2^40", tcp.shared_buffer_bytes),
        "use an arena of at most 1 TiB per rank");
  if (tcp.all_reduce > TcpAllReduce::halving_doubling)
    bad("all_reduce is not a TcpAllReduce value",
        "use automatic, ring, recursive_doubling or halving_doubling");
}

inline std::optional<std::string> token_from_environment() {
  return environment_variable("STRATA_CLUSTER_TOKEN");
}

inline std::uint64_t fingerprint_of(const std::vector<cluster::Address>& addresses) {
  std::uint64_t hash = strata::detail::kFnv1aBasis;
  for (const auto& address : addresses)
    hash = strata::detail::fnv1a(hash, address.to_string() + ",");
  return hash == 0 ? 1 : hash;
}

inline std::uint64_t tunables_hash(const TcpOptions& tcp) {
  return strata::detail::fnv1a(
      strata::detail::kFnv1aBasis,
      fmt::format("{}/{}/{}/{}/{}/{}", tcp.chunk_bytes, tcp.connections_per_peer,
                  to_string(tcp.all_reduce), tcp.small_message_bytes, tcp.shared_memory,
                  tcp.shared_buffer_bytes));
}

inline TcpAllReduce all_reduce_algorithm(const TcpOptions& tcp, const CollectiveCall& call,
                                         int size) noexcept {
  if (tcp.all_reduce != TcpAllReduce::automatic) return tcp.all_reduce;
  // S·⌈log2 size⌉·(size−1) ≤ small_message_bytes, without overflowing.
  const auto rounds = std::max<std::size_t>(1, std::bit_width(static_cast<unsigned>(size) - 1));
  const auto factor = rounds * static_cast<std::size_t>(std::max(1, size - 1));
  return call.count * size_of(call.type) <= tcp.small_message_bytes / factor
             ? TcpAllReduce::recursive_doubling
             : TcpAllReduce::ring;
}

/// Runs `call` on `link` (of the whole group, or of one rank per host: Link::select) with the
/// TCP algorithm the options choose.
inline void run_algorithm(transport::tcp::Link& link, const CollectiveCall& call,
                          const TcpOptions& tcp) {
  switch (call.kind) {
    case Collective::all_reduce:
      switch (all_reduce_algorithm(tcp, call, link.size())) {
        case TcpAllReduce::recursive_doubling:
          algorithms::AllReduceRecursiveDoubling::run(link, call);
          return;
        case TcpAllReduce::halving_doubling:
          algorithms::AllReduceHalvingDoubling::run(link, call);
          return;
        case TcpAllReduce::automatic:  // all_reduce_algorithm decided
        case TcpAllReduce::ring:
          algorithms::AllReduceRing::run(link, call);
          return;
      }
      return;
    case Collective::broadcast:
      algorithms::BroadcastRing::run(link, call);
      return;
    case Collective::reduce:
      algorithms::ReduceRing::run(link, call);
      return;
    case Collective::all_gather:
      algorithms::AllGatherRing::run(link, call);
      return;
    case Collective::reduce_scatter:
      algorithms::ReduceScatterRing::run(link, call);
      return;
    case Collective::barrier:
      algorithms::BarrierDissemination::run(link, call);
      return;
  }
}

}  // namespace detail::tcp_communicator

STRATA_DECL TcpMembership membership_of(cluster::ResolvedCluster& resolved) {
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

STRATA_DECL TcpCommunicator::TcpCommunicator(TcpMembership membership, TcpOptions tcp,
                                             CommunicatorOptions options)
    : state_(std::make_unique<State>(options, tcp)) {
  const int size = static_cast<int>(membership.addresses.size());
  try {
    if (size < 1 || membership.rank < 0 || membership.rank >= size)
      throw UsageError(
          membership.rank, "TcpCommunicator",
          fmt::format("rank {} is not in a group of {} addresses", membership.rank, size),
          "pass every rank's address and a rank in [0, addresses.size())");
    detail::tcp_communicator::validate(tcp, membership.rank);
  } catch (...) {
    // The listening socket is this communicator's once passed: refusing must not leak it.
    if (membership.listen_fd >= 0) ::close(membership.listen_fd);
    throw;
  }
  transport::tcp::MeshConfig config;
  config.rank = membership.rank;
  config.addresses = std::move(membership.addresses);
  config.cluster = membership.cluster_fingerprint != 0
                       ? membership.cluster_fingerprint
                       : detail::tcp_communicator::fingerprint_of(config.addresses);
  config.tunables = detail::tcp_communicator::tunables_hash(tcp);
  config.data_connections = tcp.connections_per_peer;
  config.token =
      tcp.cluster_token ? tcp.cluster_token : detail::tcp_communicator::token_from_environment();
  config.socket_buffer_bytes = tcp.socket_buffer_bytes;
  config.no_delay = tcp.no_delay;
  config.congestion_control = tcp.congestion_control;
  config.listen_fd = membership.listen_fd;
  auto mesh = transport::tcp::form_mesh(config, Deadline::after(options.timeout));
  state_->group = std::make_unique<transport::tcp::Group>(
      std::move(mesh), static_cast<std::uint32_t>(tcp.chunk_bytes), tcp.lend_from_bytes);
  if (tcp.shared_memory && size > 1) share_memory(options);
}

STRATA_DECL std::vector<TcpCommunicator> TcpCommunicator::create(int size,
                                                                 CommunicatorOptions options,
                                                                 TcpOptions tcp) {
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

STRATA_DECL TcpCommunicator::TcpCommunicator(TcpCommunicator&&) noexcept = default;
STRATA_DECL TcpCommunicator& TcpCommunicator::operator=(TcpCommunicator&&) noexcept = default;
STRATA_DECL TcpCommunicator::~TcpCommunicator() = default;

STRATA_DECL int TcpCommunicator::rank() const noexcept {
  return state_->group->rank();
}
STRATA_DECL int TcpCommunicator::size() const noexcept {
  return state_->group->size();
}
STRATA_DECL const CommunicatorOptions& TcpCommunicator::options() const noexcept {
  return state_->options;
}
STRATA_DECL const TcpOptions& TcpCommunicator::tcp_options() const noexcept {
  return state_->tcp;
}
STRATA_DECL bool TcpCommunicator::uses_shared_memory() const noexcept {
  return state_->shm != nullptr;
}

STRATA_DECL void TcpCommunicator::abort(std::string_view reason) noexcept {
  if (state_->shm) state_->shm->fail();
  try {
    state_->group->fail(transport::tcp::FailureClass::peer_failure,
                        RootCause{rank(), fmt::format("rank {} aborted: {}", rank(), reason)});
  } catch (...) {  // no memory for the text: the group fails all the same
    state_->group->fail(transport::tcp::FailureClass::peer_failure, RootCause{rank(), {}});
  }
}

STRATA_DECL void TcpCommunicator::fail(const std::exception_ptr& error) noexcept {
  if (state_->shm) state_->shm->fail();
  state_->group->fail(error);
}

STRATA_DECL void TcpCommunicator::check_peers() {
  auto& group = *state_->group;
  if (group.failed()) group.raise_failure("check_peers");
  CollectiveCall call;  // no data: what messages name, a barrier
  transport::tcp::CallControl control(group, call, group.calls(), Deadline::after({}));
  try {
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank()) control.read(peer, /*inside_call=*/false);
  } catch (...) {
    group.fail(std::current_exception());
    throw;
  }
}

STRATA_DECL void TcpCommunicator::fail_usage(Collective kind, std::string_view what,
                                             std::string_view what_to_do) {
  UsageError error(rank(), to_string(kind), what, what_to_do);
  // The peers are about to wait for this rank: fail the group so they learn why at once.
  if (state_->shm) state_->shm->fail();
  state_->group->fail(transport::tcp::FailureClass::peer_failure, error.root_cause());
  throw error;
}

STRATA_DECL void TcpCommunicator::run(const CollectiveCall& call, const CallOptions& options) {
  state_->executor.drain();  // keep call order with earlier asynchronous calls
  execute(*state_, call, options);
}

STRATA_DECL Work TcpCommunicator::submit(const CollectiveCall& call, const CallOptions& options) {
  State* state = state_.get();
  return state->executor.submit([state, call, options] { execute(*state, call, options); });
}

STRATA_DECL void TcpCommunicator::execute(State& state, const CollectiveCall& call,
                                          const CallOptions& options) {
  auto& group = *state.group;
  if (group.failed()) group.raise_failure(to_string(call.kind));
  const auto deadline = Deadline::after(options.timeout.value_or(state.options.timeout));
  if (!state.hosts.empty()) {
    execute_across_hosts(state, call, deadline);
    return;
  }
  if (state.shm) {
    execute_shared(state, call, deadline);
    return;
  }
  transport::tcp::Link link(group, call, deadline);
  try {
    detail::tcp_communicator::run_algorithm(link, call, state.tcp);
  } catch (...) {
    group.fail(std::current_exception());
    throw;
  }
}

}  // namespace strata::communicator

#include <strata/communicator/impl/tcp_shared_memory.ipp>
