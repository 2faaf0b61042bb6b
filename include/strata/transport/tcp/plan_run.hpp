// strata/transport/tcp/plan_run.hpp — running one plan (transport/plan.hpp) over the group's
// data connections, on the calling thread.
//
// Every send and receive of the plan progresses at once, with non-blocking sockets and
// poll(2): each turn of the loop posts what every channel (channel.hpp) can send and receive,
// runs the handlers whose dependencies are done, and, when nothing moved, waits for the
// sockets, the control connections (control.hpp), abort() or the deadline. Reductions thus run
// as soon as their data is in while the kernel keeps receiving into its buffers: transfer and
// reduction overlap.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#include <poll.h>
#include <sched.h>

#include <strata/core/deadline.hpp>
#include <strata/transport/plan.hpp>
#include <strata/transport/tcp/busy_poll.hpp>
#include <strata/transport/tcp/channel.hpp>
#include <strata/transport/tcp/control.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/group.hpp>
#include <strata/transport/tcp/lending.hpp>

namespace strata::transport::tcp {

/// Where ranks share CPUs, a rank hands its CPU over (sched_yield) after each message of this
/// size or more that it sends. Without that, it goes on with its own next messages while the
/// receiver, runnable on the same CPU with work that the other CPUs wait for, does not run: the
/// ring fell into schedules where the CPUs took turns instead of working at once
/// (benchmarks/RESULTS.md). Smaller messages are latency-bound: a system call each is a real
/// share.
inline constexpr std::size_t kYieldAfterSendBytes = std::size_t{64} << 10;

/// One run of a plan: the channels' progress, which steps are done, and the loop that drives
/// them. `on_received(j)` runs once receive j is complete and its `after_send` and `after_recv`
/// are done.
class PlanRun {
 public:
  PlanRun(CallControl& control, std::span<const SendStep> sends, std::span<const RecvStep> recvs,
          ReceiveHandler on_received)
      : control_(control),
        group_(control.group()),
        sends_(sends),
        recvs_(recvs),
        on_received_(on_received) {}
  PlanRun(const PlanRun&) = delete;
  PlanRun& operator=(const PlanRun&) = delete;

  /// Returns when every step has completed and every peer has read what this rank lent it.
  /// The group is failed before any error propagates.
  void run() {
    assign_channels();
    std::optional<SigpipeBlocked> sigpipe_blocked;
    if (attach_pipes()) sigpipe_blocked.emplace();
    start_lending();
    send_done_.assign(sends_.size(), 0);
    recv_processed_.assign(recvs_.size(), 0);
    sends_left_ = sends_.size();
    recvs_left_ = recvs_.size();
    busy_until_ = Clock::now() + kBusyPoll;
    try {
      while (sends_left_ > 0 || recvs_left_ > 0 || awaiting_release()) {
        if (group_.failed()) group_.raise_failure(control_.operation());
        if (advance() || (sends_left_ == 0 && recvs_left_ == 0 && !awaiting_release())) {
          busy_until_ = Clock::now() + kBusyPoll;
          continue;
        }
        wait();
      }
      check_lenders();
    } catch (...) {
      control_.checking_lender(false);
      group_.fail(std::current_exception());
      if (awaiting_release()) control_.await_releases_after_failure();
      throw;
    }
  }

 private:
  // ---- setting up ---------------------------------------------------------------------------

  Channel& channel_of(int peer, std::size_t ordinal) {
    const auto data_connections = static_cast<std::size_t>(group_.data_connections());
    return channels_[static_cast<std::size_t>(peer) * data_connections +
                     ordinal % data_connections];
  }

  // Deals the plan's steps to the channels (channel.hpp: message n to a peer goes on its
  // channel n mod K) and keeps the channels that carry any.
  void assign_channels() {
    const int data_connections = group_.data_connections();
    channels_.resize(static_cast<std::size_t>(control_.size() * data_connections));
    std::vector<std::size_t> send_ordinal(static_cast<std::size_t>(control_.size()), 0);
    std::vector<std::size_t> recv_ordinal(static_cast<std::size_t>(control_.size()), 0);
    for (std::size_t i = 0; i < sends_.size(); ++i)
      channel_of(sends_[i].peer, send_ordinal[static_cast<std::size_t>(sends_[i].peer)]++)
          .sends.push_back(i);
    for (std::size_t j = 0; j < recvs_.size(); ++j)
      channel_of(recvs_[j].peer, recv_ordinal[static_cast<std::size_t>(recvs_[j].peer)]++)
          .recvs.push_back(j);
    for (int peer = 0; peer < control_.size(); ++peer)
      for (int k = 0; k < data_connections; ++k) {
        auto& channel = channels_[static_cast<std::size_t>(peer * data_connections + k)];
        channel.peer = peer;
        channel.connection = 1 + k;
        channel.fd = peer == control_.rank() ? -1 : group_.mesh().fd(peer, channel.connection);
      }
    std::erase_if(channels_, [](const Channel& c) { return c.sends.empty() && c.recvs.empty(); });
  }

  // Chooses the sends to lend (lending.hpp) and gives their channels a pipe; a channel that
  // gets none copies. True when anything is lent.
  bool attach_pipes() {
    lend_ = lendable_sends(sends_, recvs_, group_.lend_from_bytes());
    bool lends = false;
    for (auto& channel : channels_) {
      if (channel.fd < 0 || std::none_of(channel.sends.begin(), channel.sends.end(),
                                         [&](std::size_t i) { return lend_[i] != 0; }))
        continue;
      channel.pipe = group_.pipe_for(channel.peer, channel.connection);
      if (channel.pipe != nullptr) {
        lends = true;
        continue;
      }
      for (const std::size_t i : channel.sends)  // no pipe to be had: this connection copies
        lend_[i] = 0;
    }
    return lends;
  }

  // Per peer: payload bytes read from it out of its memory. What this rank lent each peer, and
  // what the peer read of it, the control connections' state counts (CallControl::read checks
  // it).
  void start_lending() {
    read_lent_.assign(static_cast<std::size_t>(control_.size()), 0);
    for (auto& state : group_.peer_states()) {
      state.lent_bytes = 0;
      state.lent_sent_bytes = 0;
      state.released_bytes = 0;
    }
  }

  // ---- dependencies -------------------------------------------------------------------------

  bool awaiting_release() const {
    for (int peer = 0; peer < control_.size(); ++peer)
      if (control_.unreleased(peer) > 0) return true;
    return false;
  }

  // A lent send starts only while the peer has read all but kLendWindowBytes of what it was
  // lent: the receiver's socket then never holds more than that of this rank's pages.
  bool window_full(const Channel& channel, std::size_t i) const {
    if (lend_[i] == 0 || channel.started) return false;
    const std::uint64_t outstanding = control_.unreleased(channel.peer);
    return outstanding > 0 && outstanding + sends_[i].bytes > kLendWindowBytes;
  }

  bool send_ready(std::size_t i) const {
    return sends_[i].after_recv < 0 ||
           recv_processed_[static_cast<std::size_t>(sends_[i].after_recv)] != 0;
  }

  bool handler_ready(std::size_t j) const {
    const RecvStep& step = recvs_[j];
    return (step.after_send < 0 || send_done_[static_cast<std::size_t>(step.after_send)] != 0) &&
           (step.after_recv < 0 || recv_processed_[static_cast<std::size_t>(step.after_recv)] != 0);
  }

  void process(std::size_t j) {
    on_received_(j);
    recv_processed_[j] = 1;
    --recvs_left_;
  }

  // Runs the handlers of receives that were in but waited for a send or another handler; true
  // when any ran.
  bool process_deferred() {
    if (deferred_.empty()) return false;
    const auto before = deferred_.size();
    std::erase_if(deferred_, [&](std::size_t j) {
      if (!handler_ready(j)) return false;
      process(j);
      return true;
    });
    return deferred_.size() != before;
  }

  // ---- moving data --------------------------------------------------------------------------

  // One turn over every channel and the waiting handlers; true when anything moved.
  bool advance() {
    bool progressed = false;
    for (auto& channel : channels_) {
      if (post_sends(channel)) progressed = true;
      if (post_receives(channel)) progressed = true;
    }
    if (process_deferred()) progressed = true;
    return progressed;
  }

  // Sends: as much as the socket takes.
  bool post_sends(Channel& channel) {
    bool progressed = false;
    while (channel.next_send < channel.sends.size()) {
      const std::size_t i = channel.sends[channel.next_send];
      if (!send_ready(i)) break;
      if (window_full(channel, i)) {
        control_.read(channel.peer, /*inside_call=*/true);  // a release may be waiting
        if (window_full(channel, i)) break;
      }
      const SendStep& step = sends_[i];
      if (!channel.started) start_send(channel, i);
      if (!(lend_[i] != 0 ? channel.send_lent(step, control_)
                          : channel.send_copied(step, control_)))
        break;
      on_send_done(channel, i);
      progressed = true;
    }
    return progressed;
  }

  // Builds the head send's header, "lent" only once the first part of the payload is in the
  // pipe: pages vmsplice(2) cannot pin (device or I/O mappings) are copied instead.
  void start_send(Channel& channel, std::size_t i) {
    const SendStep& step = sends_[i];
    if (lend_[i] != 0 && !channel.fill_pipe(step)) lend_[i] = 0;
    FrameHeader header = data_header(control_, step.bytes);
    if (lend_[i] != 0) {
      header.flags = static_cast<std::uint8_t>(FrameFlag::lent);
      group_.peer_state(channel.peer).lent_bytes += step.bytes;
    }
    channel.send_header = encode(header);
    channel.started = true;
  }

  void on_send_done(Channel& channel, std::size_t i) {
    const SendStep& step = sends_[i];
    if (lend_[i] != 0) group_.peer_state(channel.peer).lent_sent_bytes += step.bytes;
    // The peer's releases, read as its lent messages go out: left unread until the end of a
    // long call they could fill the control connection, and one would be lost.
    if (lend_[i] != 0) control_.read(channel.peer, /*inside_call=*/true);
    channel.started = false;
    channel.sent = 0;
    channel.lent = 0;
    ++channel.next_send;
    send_done_[i] = 1;
    --sends_left_;
    if (step.bytes >= kYieldAfterSendBytes && group_.ranks_share_cpus()) ::sched_yield();
  }

  // Receives: the header first, checked against this rank's call, then the payload straight
  // into its destination.
  bool post_receives(Channel& channel) {
    bool progressed = false;
    while (channel.next_recv < channel.recvs.size()) {
      const std::size_t j = channel.recvs[channel.next_recv];
      const RecvStep& step = recvs_[j];
      if (channel.header_got < kFrameHeaderBytes && !channel.receive_header(step, control_)) break;
      if (channel.payload_got < step.bytes && !channel.receive_payload(step, control_)) break;
      on_message_in(channel, j);
      progressed = true;
    }
    return progressed;
  }

  // Receive j is in: release it if it was lent, and run its handler or defer it.
  void on_message_in(Channel& channel, std::size_t j) {
    channel.header_got = 0;
    channel.payload_got = 0;
    ++channel.next_recv;
    if (channel.recv_lent) {
      auto& read = read_lent_[static_cast<std::size_t>(channel.peer)];
      read += recvs_[j].bytes;
      group_.send_control(channel.peer, FrameType::release, {}, control_.sequence(), read);
    }
    if (!handler_ready(j)) {
      deferred_.push_back(j);
      return;
    }
    process(j);
  }

  // ---- waiting ------------------------------------------------------------------------------

  // Nothing moved: wait for the sockets, the control connections, abort() or the deadline.
  void wait() {
    collect_poll_set();
    const int ready = poll_ready();
    if (ready < 0 && errno == EINTR) return;
    if (ready == 0 && control_.deadline().expired()) on_deadline();
    for (std::size_t k = 0; k < fds_.size(); ++k)
      if (fd_peer_[k] >= 0 && fds_[k].revents != 0)
        control_.read(fd_peer_[k], /*inside_call=*/true);
  }

  // The wake fd, every open control connection, and the data connections that wait to send or
  // receive.
  void collect_poll_set() {
    fds_.clear();
    fd_peer_.clear();
    fds_.push_back({group_.wake_fd(), POLLIN, 0});
    fd_peer_.push_back(-1);
    for (int peer = 0; peer < control_.size(); ++peer) {
      if (peer == control_.rank() || group_.peer_state(peer).closed) continue;
      fds_.push_back({group_.mesh().fd(peer, 0), POLLIN, 0});
      fd_peer_.push_back(peer);
    }
    for (std::size_t c = 0; c < channels_.size(); ++c) {
      const auto& channel = channels_[c];
      short events = 0;
      if (channel.next_recv < channel.recvs.size()) events |= POLLIN;
      if (channel.next_send < channel.sends.size() &&
          send_ready(channel.sends[channel.next_send]) &&
          !window_full(channel, channel.sends[channel.next_send]))
        events |= POLLOUT;
      if (events == 0) continue;
      fds_.push_back({channel.fd, events, 0});
      fd_peer_.push_back(-2 - static_cast<int>(c));
    }
  }

  // poll(2) over the poll set: without sleeping until busy_until_, then sleeping up to the
  // deadline. Returns what poll(2) returned (errno tells an interruption).
  int poll_ready() {
    return poll_busy_then_sleep(fds_, busy_until_, control_.deadline().time_point());
  }

  // The deadline passed: name the peers this rank was waiting for.
  [[noreturn]] void on_deadline() {
    std::vector<int> waiting_for;
    for (const auto& channel : channels_)
      if (channel.next_recv < channel.recvs.size() || channel.next_send < channel.sends.size())
        waiting_for.push_back(channel.peer);
    for (int peer = 0; peer < control_.size(); ++peer)
      if (control_.unreleased(peer) > 0) waiting_for.push_back(peer);
    std::sort(waiting_for.begin(), waiting_for.end());
    waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
    control_.timed_out(waiting_for);
  }

  // A lender that failed returns without waiting for every release (at most a grace period),
  // and its caller may then overwrite pages this rank read last. It says so before it returns:
  // what this rank read may be wrong if that word is here now.
  void check_lenders() {
    control_.checking_lender(true);
    for (int peer = 0; peer < control_.size(); ++peer)
      if (read_lent_[static_cast<std::size_t>(peer)] > 0) control_.read(peer, /*inside_call=*/true);
  }

  CallControl& control_;
  Group& group_;
  std::span<const SendStep> sends_;
  std::span<const RecvStep> recvs_;
  ReceiveHandler on_received_;
  std::vector<Channel> channels_;
  std::vector<char> lend_;                // per send: lent (1) or copied (0)
  std::vector<std::uint64_t> read_lent_;  // per peer: payload bytes read out of its memory
  std::vector<char> send_done_;
  std::vector<char> recv_processed_;  // handler run
  std::size_t sends_left_ = 0;
  std::size_t recvs_left_ = 0;
  std::vector<std::size_t> deferred_;  // receives that are in but wait for their send
  std::vector<pollfd> fds_;
  std::vector<int> fd_peer_;  // -1: the wake fd; peer for control fds; -2 - index for channels
  Clock::time_point busy_until_{};
};

}  // namespace strata::transport::tcp
