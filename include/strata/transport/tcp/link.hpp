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
#include <type_traits>

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

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }
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
  template <class OnReceived>
  void transfer(std::span<const transport::SendStep> sends,
                std::span<const transport::RecvStep> recvs, OnReceived&& on_received);

 private:
  Group& group_;
  CallControl control_;
};

template <class OnReceived>
void Link::transfer(std::span<const transport::SendStep> sends,
                    std::span<const transport::RecvStep> recvs, OnReceived&& on_received) {
  if (group_.failed()) group_.raise_failure(control_.operation());
  // A peer may have failed the group while this rank was away (a broadcast root returns
  // without hearing from anyone): a plan that receives learns it from the closed data
  // connections and, when it waits, from the control connections it polls; one that only
  // sends asks now, rather than succeed on a failed group. (The question costs a system call,
  // a visible share of a small all-reduce: only plans that receive nothing ask.)
  if (recvs.empty()) control_.poll(0);
  PlanRun<std::remove_reference_t<OnReceived>> run(control_, sends, recvs, on_received);
  run.run();
}

}  // namespace strata::transport::tcp
