// strata/transport/tcp/link.hpp — moving an algorithm's messages over the mesh, with deadlines,
// header checks and failure propagation: the TCP model of algorithms::MessageLink.
//
// An algorithm describes one collective as a plan: the sends and receives of this rank, in
// order per peer, each send possibly waiting for a receive (it forwards what arrived) and each
// receive possibly waiting for a send (its reduction overwrites what the send reads). The link
// runs the plan on the calling thread (plan_run.hpp) over the group's data connections
// (channel.hpp), lends large messages' pages instead of copying them (lending.hpp), and
// watches the control connections meanwhile (control.hpp): an abort, a killed peer or the
// deadline ends the call on every rank within milliseconds.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/transport/plan.hpp>
#include <strata/transport/tcp/control.hpp>
#include <strata/transport/tcp/group.hpp>
#include <strata/transport/tcp/lending.hpp>
#include <strata/transport/tcp/plan_run.hpp>

namespace strata::transport::tcp {

/// One collective call of one rank: what algorithms see (rank, size, the call) and the
/// `transfer` that runs their plans.
class Link {
 public:
  /// The link's tunables, named where the code that uses them lives: plan_run.hpp (polling,
  /// yielding) and lending.hpp (what is lent, how far ahead).
  static constexpr std::chrono::microseconds kBusyPoll = tcp::kBusyPoll;
  static constexpr std::size_t kLendBytes = tcp::kLendBytes;
  static constexpr std::uint64_t kLendWindowBytes = tcp::kLendWindowBytes;
  static constexpr std::size_t kYieldAfterSendBytes = tcp::kYieldAfterSendBytes;

  Link(Group& group, const CollectiveCall& call, Deadline deadline)
      : group_(group), control_(group, call, group.next_sequence(), deadline) {}

  /// Narrows what algorithms see to some of the group's ranks, `members` (group ranks, in the
  /// order the algorithm numbers them; this rank is `members[index]`): a group that spans hosts
  /// runs its collectives in stages (communicator/impl/tcp_shared_memory.ipp), the middle one an
  /// ordinary algorithm among one rank per host. `members` must outlive the link.
  void select(std::span<const int> members, int index) noexcept {
    members_ = members;
    index_ = index;
  }

  int rank() const noexcept { return members_.empty() ? group_.rank() : index_; }
  int size() const noexcept {
    return members_.empty() ? group_.size() : static_cast<int>(members_.size());
  }
  std::uint64_t sequence() const noexcept { return control_.sequence(); }
  /// The largest message the algorithms cut a collective into (TcpOptions::chunk_bytes).
  std::size_t chunk_bytes() const noexcept { return group_.chunk_bytes(); }
  /// How many messages from one peer may be in flight at once (TcpOptions::
  /// connections_per_peer): receive buffers indexed modulo this are never overwritten early.
  int channels_per_peer() const noexcept { return group_.data_connections(); }
  /// Scratch memory owned by the group, reused across calls; valid until the next call.
  std::byte* scratch(std::size_t bytes) { return group_.scratch(bytes); }
  /// The call's reading of the control connections (a wait elsewhere watches the peers with it).
  CallControl& control() noexcept { return control_; }

  /// Runs the plan: every send and receive, `on_received(j)` once receive j is complete (and
  /// its `after_send` and `after_recv` are done). Returns when every step has completed.
  /// @throws MismatchError when a peer's message describes another call; PeerFailureError when
  /// a peer closed its connections or failed; TimeoutError at the deadline, naming the ranks
  /// that did not answer. The group is failed before any of them propagates.
  void transfer(std::span<const transport::SendStep> sends,
                std::span<const transport::RecvStep> recvs, ReceiveHandler on_received) {
    if (group_.failed()) group_.raise_failure(control_.operation());
    // A peer may have failed the group while this rank was away (a broadcast root returns
    // without hearing from anyone): a plan that receives learns it from the closed data
    // connections and, when it waits, from the control connections it polls; one that only
    // sends asks now, rather than succeed on a failed group. (The question costs a system call,
    // a visible share of a small all-reduce: only plans that receive nothing ask.)
    if (recvs.empty()) control_.poll(0);
    if (members_.empty()) {
      PlanRun run(control_, sends, recvs, on_received);
      run.run();
      return;
    }
    // Numbered among the members: the plan's peers to group ranks.
    std::vector<SendStep> group_sends(sends.begin(), sends.end());
    std::vector<RecvStep> group_recvs(recvs.begin(), recvs.end());
    for (auto& step : group_sends)
      step.peer = members_[static_cast<std::size_t>(step.peer)];
    for (auto& step : group_recvs)
      step.peer = members_[static_cast<std::size_t>(step.peer)];
    PlanRun run(control_, group_sends, group_recvs, on_received);
    run.run();
  }

 private:
  Group& group_;
  CallControl control_;
  std::span<const int> members_;  // empty: every rank of the group, as the group numbers them
  int index_ = 0;
};

}  // namespace strata::transport::tcp
