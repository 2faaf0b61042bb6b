// strata/communicator/impl/tcp.ipp — TcpCommunicator's definitions over the TCP transport.
// Included at the end of communicator/tcp.hpp (header-only) or by impl/src.hpp after it
// (compiled), never on its own.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
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
#include <strata/transport/shm/collectives.hpp>
#include <strata/transport/shm/group.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/shm/region.hpp>
#include <strata/transport/tcp/control.hpp>
#include <strata/transport/tcp/form_mesh.hpp>
#include <strata/transport/tcp/group.hpp>
#include <strata/transport/tcp/link.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/sub_link.hpp>

namespace strata::communicator {

static_assert(algorithms::MessageLink<transport::tcp::Link>);

struct TcpCommunicator::State {
  State(const CommunicatorOptions& o, const TcpOptions& t) : options(o), tcp(t) {}
  CommunicatorOptions options;
  TcpOptions tcp;
  std::unique_ptr<transport::tcp::Group> group;
  // The region of this host's ranks; null when shared memory is off or this rank is alone.
  std::unique_ptr<transport::shm::Group> shm;
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
      fmt::format("{}/{}/{}/{}/{}", tcp.chunk_bytes, tcp.connections_per_peer,
                  to_string(tcp.all_reduce), tcp.small_message_bytes, tcp.shared_memory));
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

/// Runs `call` on `link` (a Link, or a SubLink of one rank per host) with the TCP algorithm
/// the options choose.
template <class MessageLink>
void run_algorithm(MessageLink& link, const CollectiveCall& call, const TcpOptions& tcp) {
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

/// Staging buffers of shared memory: half a TCP chunk (TcpOptions::chunk_bytes), within what a
/// region of many ranks can hold.
inline std::size_t shared_slot_bytes(const TcpOptions& tcp) noexcept {
  const std::size_t bytes =
      std::clamp<std::size_t>(tcp.chunk_bytes / 2, std::size_t{32} << 10, std::size_t{16} << 20);
  return bytes / 64 * 64;
}

/// What a shared-memory call does while it waits: reads the peers' control connections (a
/// dead peer closed them, a failed one said why) and keeps the deadline.
struct SharedMemoryWatch {
  transport::tcp::CallControl& control;

  void operator()(int peer) {
    control.poll(0);
    const auto& state = control.group().peer_state(peer);
    if (state.departed || state.closed) control.peer_closed(peer);
    if (control.deadline().expired()) control.timed_out({peer});
  }

  /// Some rank marked the region failed: its reason follows on its control connection.
  [[noreturn]] void group_failed() {
    auto& group = control.group();
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (!group.failed() && Clock::now() < until)
      control.poll(10);
    if (group.failed()) group.raise_failure(control.operation());
    throw PeerFailureError(
        control.rank(), control.operation(),
        RootCause{-1, "a rank of this host failed the group without saying why"});
  }
};

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

STRATA_DECL void TcpCommunicator::share_memory(const CommunicatorOptions& options) {
  namespace shm = transport::shm;
  const int n = size();
  const int r = rank();
  const CallOptions call_options{options.timeout};
  // Gathers only: a byte all-reduce here would compile the uint8 kernels into every user.
  auto gather_tcp = [&](const void* send, void* recv, std::size_t count) {
    const CollectiveCall call{
        Collective::all_gather, DataType::uint8, count, ReduceOp::sum, 0, send, recv};
    execute(*state_, call, call_options);
  };
  // Every rank learns every rank's host; hosts are numbered in the order of their lowest
  // rank, and a rank whose host is unknown is a host of its own.
  const shm::HostIdentity host = shm::this_host();
  std::vector<shm::HostIdentity> identities(static_cast<std::size_t>(n));
  gather_tcp(host.bytes.data(), identities.data(), shm::HostIdentity::kBytes);
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const auto& identity = identities[static_cast<std::size_t>(q)];
    std::size_t h = 0;
    while (h < hosts.size() &&
           !(identity.known() && identities[static_cast<std::size_t>(hosts[h][0])] == identity))
      ++h;
    if (h == hosts.size()) hosts.emplace_back();
    hosts[h].push_back(q);
    host_of[static_cast<std::size_t>(q)] = static_cast<int>(h);
  }
  if (hosts.size() == static_cast<std::size_t>(n)) return;  // no two ranks share a host
  const std::vector<int>& mine =
      hosts[static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)])];
  const int local_size = static_cast<int>(mine.size());
  const int local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), r) - mine.begin());
  const shm::Layout layout{local_size, detail::tcp_communicator::shared_slot_bytes(state_->tcp)};
  // The lowest rank of each host with company creates its region; every rank learns where its
  // own host's is collected. A rank the system refuses says so, and the group stays on TCP.
  using Offer = std::array<std::byte, 1 + sizeof(shm::HandoverTicket)>;
  std::optional<shm::Region> region;
  std::optional<shm::HandoverServer> server;
  Offer offer{};
  if (local_size > 1 && local_rank == 0) {
    try {
      region = shm::Region::create(layout.total_bytes(), r);
      shm::Group::initialize(*region, layout);
      server.emplace(r);
      offer[0] = std::byte{1};
      std::memcpy(offer.data() + 1, &server->ticket(), sizeof(shm::HandoverTicket));
    } catch (const Error&) {
    }
  }
  std::vector<Offer> offers(static_cast<std::size_t>(n));
  gather_tcp(offer.data(), offers.data(), offer.size());
  std::uint8_t ready = 1;
  if (local_size > 1) {
    const Offer& leader = offers[static_cast<std::size_t>(mine[0])];
    const auto handover_deadline = Deadline::after(
        std::min<std::chrono::nanoseconds>(options.timeout, std::chrono::seconds(10)));
    try {
      if (leader[0] != std::byte{1}) {
        ready = 0;
      } else if (local_rank == 0) {
        server->serve(region->fd(), local_size - 1, handover_deadline);
      } else {
        shm::HandoverTicket ticket;
        std::memcpy(&ticket, leader.data() + 1, sizeof ticket);
        region = shm::Region::adopt(shm::collect_handover(ticket, r, handover_deadline),
                                    layout.total_bytes(), r, mine[0]);
        if (!shm::Group::describes(*region, layout)) ready = 0;
      }
    } catch (const Error&) {
      ready = 0;
    }
  }
  std::vector<std::uint8_t> all_ready(static_cast<std::size_t>(n));
  gather_tcp(&ready, all_ready.data(), 1);
  if (std::find(all_ready.begin(), all_ready.end(), std::uint8_t{0}) != all_ready.end()) return;
  if (region) {
    region->close_fd();
    state_->shm = std::make_unique<shm::Group>(std::move(*region), layout, local_rank,
                                               !state_->group->ranks_share_cpus());
    state_->shm->name_ranks(mine);
  }
  if (hosts.size() > 1) {
    state_->hosts = std::move(hosts);
    state_->host_of = std::move(host_of);
  }
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

STRATA_DECL void TcpCommunicator::execute_shared(State& state, const CollectiveCall& call,
                                                 const Deadline& deadline) {
  auto& group = *state.group;
  transport::tcp::CallControl control(group, call, group.next_sequence(), deadline);
  detail::tcp_communicator::SharedMemoryWatch watch{control};
  try {
    transport::shm::run(*state.shm, call, state.shm_calls++, watch);
  } catch (...) {
    // The region wakes the peers that sleep on it at once; the control connections tell them
    // why.
    state.shm->fail();
    group.fail(std::current_exception());
    throw;
  }
}

STRATA_DECL void TcpCommunicator::execute_across_hosts(State& state, const CollectiveCall& call,
                                                       const Deadline& deadline) {
  auto& group = *state.group;
  const int n = group.size();
  const int r = group.rank();
  const auto& hosts = state.hosts;
  const auto m = hosts.size();
  const auto host = static_cast<std::size_t>(state.host_of[static_cast<std::size_t>(r)]);
  const std::vector<int>& local = hosts[host];
  const auto k = local.size();
  const auto local_rank =
      static_cast<std::size_t>(std::find(local.begin(), local.end(), r) - local.begin());
  std::size_t widest = 0;  // the most ranks on one host
  for (const auto& ranks : hosts)
    widest = std::max(widest, ranks.size());
  const std::size_t element = size_of(call.type);
  const std::size_t block = call.count * element;
  const ReduceOp summed = call.op == ReduceOp::mean ? ReduceOp::sum : call.op;
  // The rank of each host that takes part over TCP: the root where it is on that host, else
  // the host's lowest.
  const bool rooted = has_root(call.kind);
  const auto root_host =
      rooted ? static_cast<std::size_t>(state.host_of[static_cast<std::size_t>(call.root)]) : 0;
  std::vector<int> members(m);
  for (std::size_t h = 0; h < m; ++h)
    members[h] = rooted && h == root_host ? call.root : hosts[h][0];
  const int member = members[host];
  const bool across = member == r;
  const auto local_member =
      static_cast<int>(std::find(local.begin(), local.end(), member) - local.begin());

  // The call between hosts, as every rank computes it: its descriptor is what the members'
  // messages carry, and each rank numbers it alike (one Link per call on every rank).
  CollectiveCall between{call.kind, call.type, call.count,  summed, static_cast<int>(root_host),
                         nullptr,   nullptr,   call.kernels};
  if (call.kind == Collective::all_gather || call.kind == Collective::reduce_scatter)
    between.count = widest * call.count;
  transport::tcp::Link link(group, between, deadline);
  detail::tcp_communicator::SharedMemoryWatch watch{link.control()};

  auto stage = [&](std::size_t bytes) {
    if (state.staging.size() < bytes) state.staging.resize(bytes);
    return state.staging.data();
  };
  // A collective among this host's ranks: through the region, or trivially for a rank alone.
  auto on_host = [&](Collective kind, const void* send, void* recv, std::size_t count, ReduceOp op,
                     int root) {
    const CollectiveCall part{kind, call.type, count, op, root, send, recv, call.kernels};
    if (state.shm) {
      transport::shm::run(*state.shm, part, call, state.shm_calls++, watch);
      return;
    }
    const std::size_t bytes = count * element;
    if (kind != Collective::barrier && recv != nullptr && recv != send && bytes != 0)
      std::memcpy(recv, send, bytes);
  };
  auto between_hosts = [&](const void* send, void* recv) {
    if (!across) return;
    CollectiveCall part = between;
    part.send = send;
    part.recv = recv;
    transport::tcp::SubLink sub(link, members, static_cast<int>(host));
    detail::tcp_communicator::run_algorithm(sub, part, state.tcp);
  };
  auto finish_mean = [&](void* data, std::size_t count) {
    if (call.op == ReduceOp::mean && count != 0)
      kernels_of(call).divide(data, count, static_cast<std::size_t>(n));
  };

  try {
    switch (call.kind) {
      case Collective::all_reduce:
        on_host(Collective::reduce, call.send, call.recv, call.count, summed, 0);
        between_hosts(call.recv, call.recv);
        on_host(Collective::broadcast, call.recv, call.recv, call.count, ReduceOp::sum, 0);
        finish_mean(call.recv, call.count);
        break;
      case Collective::broadcast:
        between_hosts(r == call.root ? call.send : call.recv, call.recv);
        on_host(Collective::broadcast, r == call.root ? call.send : call.recv, call.recv,
                call.count, ReduceOp::sum, local_member);
        break;
      case Collective::reduce: {
        // A member that is not the root sums into staging: its own output stays untouched.
        void* target = r == call.root ? call.recv : across ? stage(block) : nullptr;
        on_host(Collective::reduce, call.send, target, call.count, summed, local_member);
        between_hosts(target, r == call.root ? call.recv : nullptr);
        if (r == call.root) finish_mean(call.recv, call.count);
        break;
      }
      case Collective::all_gather: {
        // This host's blocks, then every host's (padded to the widest host), in rank order.
        std::byte* gathered = stage(k * block + (1 + m) * widest * block);
        std::byte* padded = gathered + k * block;
        std::byte* all = padded + widest * block;
        on_host(Collective::all_gather, call.send, gathered, call.count, ReduceOp::sum, 0);
        if (across) {
          std::memcpy(padded, gathered, k * block);
          std::memset(padded + k * block, 0, (widest - k) * block);
          between_hosts(padded, all);
          for (std::size_t h = 0; h < m; ++h)
            for (std::size_t i = 0; i < hosts[h].size(); ++i)
              std::memcpy(static_cast<std::byte*>(call.recv) +
                              static_cast<std::size_t>(hosts[h][i]) * block,
                          all + (h * widest + i) * block, block);
        }
        on_host(Collective::broadcast, call.recv, call.recv,
                static_cast<std::size_t>(n) * call.count, ReduceOp::sum, 0);
        break;
      }
      case Collective::reduce_scatter: {
        // The host's sum of every block, arranged by host (padded to the widest), then
        // reduce-scattered between hosts: each host's member gets its ranks' blocks.
        const std::size_t all_bytes = static_cast<std::size_t>(n) * block;
        std::byte* summed_here = stage(all_bytes + m * widest * block + widest * block);
        std::byte* arranged = summed_here + all_bytes;
        std::byte* ours = arranged + m * widest * block;
        on_host(Collective::reduce, call.send, across ? summed_here : nullptr,
                static_cast<std::size_t>(n) * call.count, summed, 0);
        if (across) {
          std::memset(arranged, 0, m * widest * block);
          for (std::size_t h = 0; h < m; ++h)
            for (std::size_t i = 0; i < hosts[h].size(); ++i)
              std::memcpy(arranged + (h * widest + i) * block,
                          summed_here + static_cast<std::size_t>(hosts[h][i]) * block, block);
          between_hosts(arranged, ours);
        }
        on_host(Collective::broadcast, ours, ours, widest * call.count, ReduceOp::sum, 0);
        if (block != 0) std::memcpy(call.recv, ours + local_rank * block, block);
        finish_mean(call.recv, call.count);
        break;
      }
      case Collective::barrier:
        on_host(Collective::barrier, nullptr, nullptr, 0, ReduceOp::sum, 0);
        between_hosts(nullptr, nullptr);
        on_host(Collective::barrier, nullptr, nullptr, 0, ReduceOp::sum, 0);
        break;
    }
  } catch (...) {
    if (state.shm) state.shm->fail();
    group.fail(std::current_exception());
    throw;
  }
}

}  // namespace strata::communicator
