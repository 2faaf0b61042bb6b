// strata/communicator/impl/tcp_shared_memory.ipp — TcpCommunicator's calls among the ranks of
// one host: the region they share (share_memory), a call run through it, and a call over
// several hosts with shared memory inside each. Included at the end of communicator/impl/tcp.ipp,
// never on its own.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include <strata/transport/shm/arena.hpp>
#include <strata/transport/shm/collectives.hpp>
#include <strata/transport/shm/group.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/shm/region.hpp>

namespace strata::communicator {

namespace detail::tcp_communicator {

/// Staging buffers of shared memory: half a TCP chunk (TcpOptions::chunk_bytes), within what a
/// region of many ranks can hold, and at least a cache line for each of the host's `ranks` (the
/// collectives stage a slice per rank).
inline std::size_t shared_slot_bytes(const TcpOptions& tcp, int ranks) noexcept {
  const std::size_t bytes =
      std::clamp<std::size_t>(tcp.chunk_bytes / 2, std::size_t{32} << 10, std::size_t{16} << 20);
  return std::max(bytes / 64 * 64, std::size_t{64} * static_cast<std::size_t>(ranks));
}

/// Each rank's arena (TcpOptions::shared_buffer_bytes), in whole pages.
inline std::size_t arena_bytes(const TcpOptions& tcp) noexcept {
  return (tcp.shared_buffer_bytes + 4095) / 4096 * 4096;
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
  const shm::Layout layout{local_size,
                           detail::tcp_communicator::shared_slot_bytes(state_->tcp, local_size),
                           detail::tcp_communicator::arena_bytes(state_->tcp)};
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
    state_->shm = std::make_shared<shm::Group>(std::move(*region), layout, local_rank,
                                               !state_->group->ranks_share_cpus());
    state_->shm->name_ranks(mine);
    if (layout.arena_bytes > 0) state_->arena = std::make_shared<shm::Arena>(state_->shm);
  }
  if (hosts.size() > 1) {
    state_->hosts = std::move(hosts);
    state_->host_of = std::move(host_of);
  }
}

STRATA_DECL SharedBuffer TcpCommunicator::allocate_shared(std::size_t bytes) {
  if (!state_->shm) return SharedBuffer::ordinary(bytes);  // no rank to share with
  const std::size_t arena = state_->arena ? state_->arena->size() : 0;
  const std::optional<std::size_t> offset =
      state_->arena ? state_->arena->allocate(bytes) : std::nullopt;
  if (!offset)
    throw ConfigurationError(
        rank(), "allocate_shared",
        fmt::format("{} bytes asked of an arena of {} bytes with {} free", bytes, arena,
                    state_->arena ? state_->arena->free_bytes() : 0),
        "raise TcpOptions::shared_buffer_bytes (every rank of a host gets an arena that large)");
  std::byte* data = state_->arena->data() + *offset;
  std::shared_ptr<void> owner(data,
                              [arena = state_->arena, at = *offset](void*) { arena->release(at); });
  return SharedBuffer(std::span(data, bytes), std::move(owner), true);
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
  if (across) link.select(members, static_cast<int>(host));  // what the algorithms see
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
    detail::tcp_communicator::run_algorithm(link, part, state.tcp);
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
