// strata/transport/tcp/link.hpp — moving an algorithm's messages over the mesh, with deadlines,
// header checks and failure propagation.
//
// An algorithm describes one collective as a plan: the sends and receives of this rank, in
// order per peer, each send possibly waiting for a receive (it forwards what arrived) and each
// receive possibly waiting for a send (its reduction overwrites what the send reads). The link
// runs the plan on the calling thread with non-blocking sockets and poll(2): every send and
// receive of the plan progresses at once, reductions run as soon as their data is in, and
// the kernel keeps receiving into its buffers meanwhile, so transfer and reduction overlap.
//
// Large calls lend their messages instead of copying them: the pages go into a pipe with
// vmsplice(2) and from there into the socket with splice(2), so the kernel copies each byte
// once (into the receiver's memory), not twice. That pays when the data streams from memory
// (TcpOptions::lend_from_bytes); out of cache, copying is cheaper than pinning pages. Since the
// receiver reads straight out of the sender's memory:
//   - the receiver tells the sender, on the control connection, each time it has read a lent
//     message; a sender lends a peer at most kLendWindowBytes ahead of what it has read, which
//     also keeps the receiver's socket queue short (a queue that overflows its receive buffer
//     gets pruned and retransmitted), and returns only once every peer has read everything;
//   - within a call, the plan keeps lent memory unchanged until it is read: a receive
//     overwrites memory a send read only after that send (`after_send`: such sends are copied)
//     or after the peer sent something that it could only send after reading it (the ring's
//     all-gather brings a chunk back once the peer has reduced what this rank lent);
//   - a sender that fails still waits, a grace period at most, for its peers to read or fail;
//     a receiver that read lent pages checks, before it returns, whether its lender said it
//     failed in this call (within one host the abort arrives before the lender returns; across
//     hosts, after the grace period, it may still be on its way).
//
// While it waits, the link watches every peer's control connection: an abort message, a
// closed connection (a killed process) or the deadline ends the call on every rank within
// milliseconds, with the error type of the rank that failed first.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/detail/usable_cpus.hpp>
#include <strata/transport/plan.hpp>
#include <strata/transport/tcp/form_mesh.hpp>
#include <strata/transport/tcp/frame.hpp>

namespace strata::transport::tcp {

/// The connections of one rank and the state they share across calls: the first failure,
/// what each peer said on its control connection, the wake-up for abort().
class Group {
 public:
  Group(std::unique_ptr<Mesh> mesh, std::uint32_t chunk_bytes, std::size_t lend_from_bytes)
      : mesh_(std::move(mesh)),
        chunk_bytes_(chunk_bytes),
        lend_from_bytes_(lend_from_bytes),
        ranks_share_cpus_(mesh_->ranks_on_this_host() > strata::detail::host_cpus()),
        peers_(static_cast<std::size_t>(mesh_->size())) {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0)
      throw ConfigurationError(mesh_->rank(), "tcp", "eventfd failed",
                               "raise the process's file descriptor limit");
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() {
    if (!failed()) say_goodbye();
    ::close(wake_fd_);
    for (const Pipe& pipe : pipes_)
      if (pipe.read >= 0) {
        ::close(pipe.read);
        ::close(pipe.write);
      }
  }

  int rank() const noexcept { return mesh_->rank(); }
  int size() const noexcept { return mesh_->size(); }
  int data_connections() const noexcept { return mesh_->data_connections(); }
  std::uint32_t chunk_bytes() const noexcept { return chunk_bytes_; }
  /// Calls that send at least this many bytes lend their large messages (TcpOptions).
  std::size_t lend_from_bytes() const noexcept { return lend_from_bytes_; }
  /// This host runs more of the group's ranks than it has CPUs (detail::host_cpus()).
  bool ranks_share_cpus() const noexcept { return ranks_share_cpus_; }
  std::uint64_t next_sequence() noexcept {
    return sequence_.fetch_add(1, std::memory_order_relaxed);
  }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  /// Rethrows the group's first failure, as seen by a later call.
  [[noreturn]] void raise_failure(std::string_view operation) const {
    std::lock_guard lock(failure_mutex_);
    const std::string why = fmt::format("the group failed earlier: {}", failure_text_);
    const std::string_view todo = "re-create the communicator (every rank) to continue";
    switch (failure_class_) {
      case FailureClass::mismatch:
        throw MismatchError(rank(), operation, why, todo);
      case FailureClass::timeout:
        throw TimeoutError(rank(), operation, why, todo);
      case FailureClass::peer_failure:
        break;
    }
    throw PeerFailureError(rank(), operation, why, todo);
  }

  /// Fails the group: remembers the first failure, tells every peer why (on the control
  /// connections, which are always at a message boundary), and shuts every connection so that
  /// peers blocked on this rank wake at once. Safe from any thread; later calls are no-ops.
  void fail(FailureClass kind, std::string_view text) noexcept {
    {
      std::lock_guard lock(failure_mutex_);
      if (failed_.load(std::memory_order_relaxed)) return;
      failure_class_ = kind;
      failure_text_ = std::string(text);
      failed_.store(true, std::memory_order_release);
    }
    std::string payload(1, static_cast<char>(kind));
    payload.append(text.substr(0, kMaxControlPayload - 1));
    broadcast_control(FrameType::abort, payload);
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      ::shutdown(mesh_->fd(peer, 0), SHUT_WR);
      for (int index = 1; index <= data_connections(); ++index)
        ::shutdown(mesh_->fd(peer, index), SHUT_RDWR);
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] auto ignored = ::write(wake_fd_, &one, sizeof one);
  }

  /// Fails the group with `error` (a strata::Error) as the reason.
  void fail(const std::exception_ptr& error) noexcept {
    try {
      std::rethrow_exception(error);
    } catch (const MismatchError& e) {
      fail(FailureClass::mismatch, e.what());
    } catch (const TimeoutError& e) {
      fail(FailureClass::timeout, e.what());
    } catch (const std::exception& e) {
      fail(FailureClass::peer_failure, e.what());
    } catch (...) {
      fail(FailureClass::peer_failure, "unknown error");
    }
  }

 private:
  friend class Link;

  struct ControlState {
    std::array<std::byte, kFrameHeaderBytes + kMaxControlPayload> buffer{};
    std::size_t filled = 0;
    bool closed = false;
    bool departed = false;  // said goodbye: finished its collectives on purpose
    bool heard = false;     // answered during the current timeout
    // In the current call: payload bytes this rank lent the peer, and how many of them the
    // peer has said it read.
    std::uint64_t lent_bytes = 0;
    std::uint64_t lent_sent_bytes = 0;  // of lent_bytes, in messages sent whole
    std::uint64_t released_bytes = 0;
  };

  // Carries lent payloads from this rank's memory into one data connection.
  struct Pipe {
    int read = -1;
    int write = -1;
    std::size_t capacity = 0;
  };

  // The pipe of data connection `index` (1..K) to `peer`, made on first use; nullptr when the
  // system has none to give (descriptor or pipe-memory limits): that connection then copies.
  Pipe* pipe_for(int peer, int index) {
    if (pipes_.empty()) pipes_.resize(static_cast<std::size_t>(size() * data_connections()));
    Pipe& pipe = pipes_[static_cast<std::size_t>(peer * data_connections() + index - 1)];
    if (pipe.read < 0 && !pipe_refused_) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) {
        pipe_refused_ = true;
        return nullptr;
      }
      // A sandbox may forbid vmsplice(2) (seccomp): then copy, as without a pipe.
      char probe = 0;
      iovec part{&probe, 1};
      if (::vmsplice(ends[1], &part, 1, SPLICE_F_NONBLOCK) != 1 ||
          ::read(ends[0], &probe, 1) != 1) {
        ::close(ends[0]);
        ::close(ends[1]);
        pipe_refused_ = true;
        return nullptr;
      }
      // A larger pipe moves a message in fewer system calls; the kernel may refuse (per-user
      // pipe memory) and then the default, 64 KiB, does.
      ::fcntl(ends[1], F_SETPIPE_SZ, static_cast<int>(kPipeBytes));
      const int capacity = ::fcntl(ends[1], F_GETPIPE_SZ);
      pipe = {ends[0], ends[1], static_cast<std::size_t>(std::max(capacity, 4096))};
    }
    return pipe.read < 0 ? nullptr : &pipe;
  }

  static constexpr std::size_t kPipeBytes = std::size_t{1} << 20;

  void send_control(int peer, FrameType type, std::string_view payload) noexcept {
    send_control(peer, type, payload, sequence_.load(std::memory_order_relaxed), 0);
  }

  void send_control(int peer, FrameType type, std::string_view payload, std::uint64_t sequence,
                    std::uint64_t count) noexcept {
    FrameHeader header;
    header.type = type;
    header.sequence = sequence;
    header.count = count;
    header.payload_bytes = static_cast<std::uint32_t>(payload.size());
    const FrameBytes bytes = encode(header);
    iovec parts[2] = {{const_cast<std::byte*>(bytes.data()), bytes.size()},
                      {const_cast<char*>(payload.data()), payload.size()}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = payload.empty() ? 1 : 2;
    // Control frames are tiny and the connection otherwise idle: one non-blocking send fits.
    // If it does not, the peer is not reading, and it learns from the closed connection.
    std::lock_guard lock(control_mutex_);
    [[maybe_unused]] auto sent =
        ::sendmsg(mesh_->fd(peer, 0), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void broadcast_control(FrameType type, std::string_view payload) noexcept {
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank()) send_control(peer, type, payload);
  }

  void say_goodbye() noexcept {
    broadcast_control(FrameType::goodbye, {});
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank()) continue;
      for (int index = 0; index <= data_connections(); ++index)
        ::shutdown(mesh_->fd(peer, index), SHUT_WR);
    }
  }

  std::unique_ptr<Mesh> mesh_;
  std::uint32_t chunk_bytes_;
  std::size_t lend_from_bytes_;
  bool ranks_share_cpus_;
  std::vector<ControlState> peers_;
  // Atomic: abort() sends control frames from other threads while a call advances it.
  std::atomic<std::uint64_t> sequence_{0};
  std::vector<std::byte> scratch_;
  std::vector<Pipe> pipes_;  // per (peer, data connection)
  bool pipe_refused_ = false;
  int wake_fd_ = -1;
  std::mutex control_mutex_;
  mutable std::mutex failure_mutex_;
  std::atomic<bool> failed_{false};
  FailureClass failure_class_ = FailureClass::peer_failure;
  std::string failure_text_;
};

/// splice(2) into a socket, unlike send(2), cannot be told MSG_NOSIGNAL: a connection the peer
/// reset raises SIGPIPE, which kills a process that has not set it aside. Blocked on this
/// thread while it lends, and a SIGPIPE raised meanwhile is discarded: the failed splice
/// reports the closed connection.
class SigpipeBlocked {
 public:
  SigpipeBlocked() noexcept {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    was_pending_ = sigpipe_pending();
    ::pthread_sigmask(SIG_BLOCK, &sigpipe_, &previous_);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;
  ~SigpipeBlocked() {
    if (!was_pending_ && sigpipe_pending()) {
      const timespec now{};
      ::sigtimedwait(&sigpipe_, nullptr, &now);
    }
    ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  static bool sigpipe_pending() noexcept {
    sigset_t pending;
    sigemptyset(&pending);
    return ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
  }

  sigset_t sigpipe_;
  sigset_t previous_;
  bool was_pending_ = false;
};

/// One collective call of one rank: what algorithms see (rank, size, the call) and the
/// `transfer` that runs their plans.
class Link {
 public:
  /// How long a rank polls its sockets without blocking once nothing moves, before it sleeps
  /// in poll(2): longer than a loopback round trip and than one step of a ring whose ranks
  /// share cores, short next to a scheduler tick. Waking from poll(2) costs 80-280 µs; with
  /// 4 ranks on 2 cores a 1-2 MiB ring's waits often pass 200 µs, and a 200 µs budget made a
  /// 2 MiB all-reduce 1.16x slower than this one (benchmarks/RESULTS.md, thirteenth run).
  static constexpr std::chrono::microseconds kBusyPoll{1000};
  /// In a call that lends (Group::lend_from_bytes), messages this large are lent; smaller
  /// ones cost less to copy than to pin page by page.
  static constexpr std::size_t kLendBytes = std::size_t{64} << 10;
  /// How much of its memory a rank lends one peer before that peer has read it.
  static constexpr std::uint64_t kLendWindowBytes = std::uint64_t{2} << 20;
  /// Where ranks share CPUs, a rank hands its CPU over (sched_yield) after each message of
  /// this size or more that it sends. Without that, it goes on with its own next messages while
  /// the receiver, runnable on the same CPU with work that the other CPUs wait for, does not
  /// run: with 4 ranks on 2 CPUs the ring fell, for hundreds of calls at a time, into a
  /// schedule where both ranks of one CPU waited for the other CPU's and the CPUs took turns
  /// instead of working at once (1 MiB, per call: p90 1033-1198 µs before, 770-821 after;
  /// benchmarks/RESULTS.md, fifteenth run). Smaller messages are latency-bound: a system call
  /// each is a real share.
  static constexpr std::size_t kYieldAfterSendBytes = std::size_t{64} << 10;

  Link(Group& group, const CollectiveCall& call, Deadline deadline)
      : group_(group), call_(call), sequence_(group.next_sequence()), deadline_(deadline) {}

  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }
  std::uint64_t sequence() const noexcept { return sequence_; }
  /// The largest message the algorithms cut a collective into (TcpOptions::chunk_bytes).
  std::size_t chunk_bytes() const noexcept { return group_.chunk_bytes(); }
  /// How many messages from one peer may be in flight at once (TcpOptions::
  /// connections_per_peer): receive buffers indexed modulo this are never overwritten early.
  int channels_per_peer() const noexcept { return group_.data_connections(); }
  /// Scratch memory owned by the group, reused across calls; valid until the next call.
  std::byte* scratch(std::size_t bytes) {
    if (group_.scratch_.size() < bytes) group_.scratch_.resize(bytes);
    return group_.scratch_.data();
  }

  /// Runs the plan: every send and receive, `on_received(j)` once receive j is complete (and
  /// its `after_send` and `after_recv` are done). Returns when every step has completed.
  /// @throws MismatchError when a peer's message describes another call; PeerFailureError when
  /// a peer closed its connections or failed; TimeoutError at the deadline, naming the ranks
  /// that did not answer. The group is failed before any of them propagates.
  template <class OnReceived>
  void transfer(std::span<const transport::SendStep> sends,
                std::span<const transport::RecvStep> recvs, OnReceived&& on_received);

 private:
  struct Channel {
    int peer = 0;
    int connection = 0;  // 1..K: which data connection to the peer
    int fd = -1;
    std::vector<std::size_t> sends;  // indices into the plan, in order
    std::vector<std::size_t> recvs;
    std::size_t next_send = 0;
    std::size_t next_recv = 0;
    bool started = false;    // the head send's header is built (and, if lent, counted)
    std::size_t sent = 0;    // bytes of the head send written, header included
    std::size_t lent = 0;    // payload bytes of the head send put into the pipe
    bool recv_lent = false;  // the head receive's payload is lent by the peer
    Group::Pipe* pipe = nullptr;
    FrameBytes send_header{};
    std::size_t header_got = 0;
    std::size_t payload_got = 0;
    FrameBytes recv_header{};
  };

  FrameHeader expected_header(std::size_t bytes) const noexcept {
    FrameHeader header;
    header.type = FrameType::data;
    header.kind = call_.kind;
    header.element_type = call_.type;
    header.op = call_.op;
    header.root = call_.root;
    header.payload_bytes = static_cast<std::uint32_t>(bytes);
    header.sequence = sequence_;
    header.count = call_.count;
    return header;
  }

  std::string_view operation() const noexcept { return to_string(call_.kind); }

  static bool would_block() noexcept {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }

  // Writes as much of `step` (header and payload, one sendmsg) as the socket takes; true once
  // all of it is written.
  bool send_copied(Channel& channel, const SendStep& step) {
    iovec parts[2];
    int count = 0;
    if (channel.sent < kFrameHeaderBytes)
      parts[count++] = {channel.send_header.data() + channel.sent,
                        kFrameHeaderBytes - channel.sent};
    const std::size_t payload_sent =
        channel.sent > kFrameHeaderBytes ? channel.sent - kFrameHeaderBytes : 0;
    if (payload_sent < step.bytes)
      parts[count++] = {const_cast<std::byte*>(step.data) + payload_sent,
                        step.bytes - payload_sent};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(count);
    const auto n = ::sendmsg(channel.fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (would_block()) return false;
      if (errno == EFAULT) bad_buffer("send");
      peer_closed(channel.peer);
    }
    channel.sent += static_cast<std::size_t>(n);
    return channel.sent == kFrameHeaderBytes + step.bytes;
  }

  // Like send_copied, but the payload's pages go to the socket through the channel's pipe
  // instead of being copied into it.
  bool send_lent(Channel& channel, const SendStep& step) {
    if (channel.sent < kFrameHeaderBytes) {
      const auto n =
          ::send(channel.fd, channel.send_header.data() + channel.sent,
                 kFrameHeaderBytes - channel.sent, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
      if (n < 0) {
        if (would_block()) return false;
        peer_closed(channel.peer);
      }
      channel.sent += static_cast<std::size_t>(n);
      if (channel.sent < kFrameHeaderBytes) return false;
    }
    for (;;) {
      const std::size_t written = channel.sent - kFrameHeaderBytes;
      if (written == step.bytes) return true;
      if (!fill_pipe(channel, step))
        throw UsageError(
            rank(), operation(),
            fmt::format("vmsplice of the send buffer failed at byte {} of {}: {}", channel.lent,
                        step.bytes, std::generic_category().message(errno)),
            "pass buffers that stay valid for the whole call, or turn lending "
            "off (TcpOptions::lend_from_bytes = SIZE_MAX)");
      const unsigned more = channel.lent < step.bytes ? SPLICE_F_MORE : 0;
      const auto n = ::splice(channel.pipe->read, nullptr, channel.fd, nullptr,
                              channel.lent - written, SPLICE_F_NONBLOCK | SPLICE_F_MOVE | more);
      if (n < 0) {
        if (would_block()) return false;
        peer_closed(channel.peer);
      }
      if (n == 0) return false;
      channel.sent += static_cast<std::size_t>(n);
    }
  }

  // Lends the pipe as much of the payload as it takes; false when vmsplice(2) refused the
  // pages (errno says why), not merely found the pipe full.
  bool fill_pipe(Channel& channel, const SendStep& step) {
    const Group::Pipe& pipe = *channel.pipe;
    // The pipe counts pages, not bytes: vmsplice takes less than asked when the payload is not
    // page-aligned, and nothing when the pipe is full.
    const std::size_t in_pipe =
        channel.lent - (channel.sent - std::min(channel.sent, kFrameHeaderBytes));
    if (channel.lent == step.bytes || in_pipe >= pipe.capacity) return true;
    iovec part{const_cast<std::byte*>(step.data) + channel.lent,
               std::min(step.bytes - channel.lent, pipe.capacity - in_pipe)};
    const auto n = ::vmsplice(pipe.write, &part, 1, SPLICE_F_NONBLOCK);
    if (n > 0) channel.lent += static_cast<std::size_t>(n);
    return n >= 0 || would_block();
  }

  [[noreturn]] void bad_buffer(std::string_view which) {
    throw UsageError(
        rank(), operation(),
        fmt::format("the {} buffer is not memory this process may use (EFAULT)", which),
        "pass buffers that stay valid for the whole call");
  }

  [[noreturn]] void peer_closed(int peer) {
    // The peer may have said why on its control connection just before closing: give it a
    // moment to arrive.
    const auto until =
        std::min(deadline_.time_point(), Clock::now() + std::chrono::milliseconds(200));
    auto& control = group_.peers_[static_cast<std::size_t>(peer)];
    while (!control.closed && Clock::now() < until) {
      pollfd fd{group_.mesh_->fd(peer, 0), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (::poll(&fd, 1, static_cast<int>(std::max<long long>(1, left.count()))) <= 0) break;
      read_control(peer, /*inside_call=*/true);
    }
    if (control.departed)
      throw PeerFailureError(rank(), operation(),
                             fmt::format("rank {} closed its communicator while this rank still "
                                         "expected data from it in collective #{}",
                                         peer, sequence_),
                             "every rank must call the same collectives the same number of times");
    throw PeerFailureError(rank(), operation(),
                           fmt::format("rank {} closed its connection in collective #{}: the "
                                       "process exited, crashed or was killed",
                                       peer, sequence_));
  }

  [[noreturn]] void raise_abort(int peer, std::span<const std::byte> payload) {
    const auto kind =
        payload.empty() ? FailureClass::peer_failure : static_cast<FailureClass>(payload[0]);
    std::string text;
    if (payload.size() > 1)
      text.assign(reinterpret_cast<const char*>(payload.data() + 1), payload.size() - 1);
    const std::string what = fmt::format("rank {} failed the group: {}", peer, text);
    switch (kind) {
      case FailureClass::mismatch:
        throw MismatchError(rank(), operation(), what);
      case FailureClass::timeout:
        throw TimeoutError(rank(), operation(), what,
                           "find the rank named above (stopped, hung, or calling other "
                           "collectives), or raise the deadline");
      case FailureClass::peer_failure:
        break;
    }
    throw PeerFailureError(rank(), operation(), what);
  }

  // Reads whatever control frames `peer` sent; raises on an abort message or on a close
  // without goodbye.
  void read_control(int peer, bool inside_call) {
    auto& state = group_.peers_[static_cast<std::size_t>(peer)];
    const int fd = group_.mesh_->fd(peer, 0);
    while (!state.closed) {
      std::size_t want = kFrameHeaderBytes;
      FrameHeader header;
      if (state.filled >= kFrameHeaderBytes) {
        if (auto ec = decode(std::span<const std::byte, kFrameHeaderBytes>(state.buffer.data(),
                                                                           kFrameHeaderBytes),
                             header, 0)) {
          state.closed = true;
          throw PeerFailureError(
              rank(), operation(),
              fmt::format("rank {} sent an invalid control message ({})", peer, ec.message()));
        }
        want += header.payload_bytes;
      }
      if (state.filled < want) {
        const auto n =
            ::recv(fd, state.buffer.data() + state.filled, want - state.filled, MSG_DONTWAIT);
        if (n > 0) {
          state.filled += static_cast<std::size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        state.closed = true;
        // A lender that closed after this call's last release did so after it was done: the
        // next call, which needs it, reports it.
        if (!state.departed && !checking_lender_) peer_closed_control(peer);
        return;
      }
      const std::span<const std::byte> payload(state.buffer.data() + kFrameHeaderBytes,
                                               header.payload_bytes);
      state.filled = 0;
      switch (header.type) {
        case FrameType::abort:
          state.closed = true;
          // Control frames carry how many calls their sender had begun: a lender that failed
          // in a later call than this one is that call's news.
          if (checking_lender_ && header.sequence > sequence_ + 1) {
            try {
              raise_abort(peer, payload);
            } catch (const Error&) {
              group_.fail(std::current_exception());
            }
            return;
          }
          raise_abort(peer, payload);
        case FrameType::timeout_notice:
          state.heard = true;
          if (inside_call) group_.send_control(peer, FrameType::alive, {});
          break;
        case FrameType::alive:
          state.heard = true;
          break;
        case FrameType::goodbye:
          state.departed = true;
          break;
        case FrameType::release:
          // Releases count up within the call that lent: believing any other would hand back
          // memory the peer may still read, or wait for a release that never comes.
          if (header.sequence != sequence_ || header.count > state.lent_bytes ||
              header.count < state.released_bytes) {
            state.closed = true;
            throw PeerFailureError(
                rank(), operation(),
                fmt::format("rank {} said it had read {} bytes this rank lent it in collective "
                            "#{}, but in collective #{} this rank lent it {} bytes, of which it "
                            "had read {}",
                            peer, header.count, header.sequence, sequence_, state.lent_bytes,
                            state.released_bytes),
                "run the same strata version on every rank");
          }
          state.released_bytes = header.count;
          break;
        case FrameType::data:
          state.closed = true;
          throw PeerFailureError(rank(), operation(),
                                 fmt::format("rank {} sent data on its control connection", peer));
      }
    }
  }

  [[noreturn]] void peer_closed_control(int peer) {
    throw PeerFailureError(rank(), operation(),
                           fmt::format("rank {} closed its connections without saying why in "
                                       "collective #{}: the process exited, crashed or was killed",
                                       peer, sequence_));
  }

  [[noreturn]] void mismatch(int peer, const FrameHeader& got) {
    if (got.sequence != sequence_)
      throw MismatchError(
          rank(), operation(),
          fmt::format("rank {} sent data for its collective #{} ({}) while this rank is in "
                      "collective #{} ({})",
                      peer, got.sequence, describe_header(got), sequence_, describe(call_)),
          "every rank must call the same collectives in the same order; one rank called more "
          "or fewer than the others");
    throw MismatchError(
        rank(), operation(),
        fmt::format("ranks disagree on collective #{}: this rank (rank {}) called "
                    "{} but rank {} called {}",
                    sequence_, rank(), describe(call_), peer, describe_header(got)));
  }

  static std::string describe_header(const FrameHeader& header) {
    CollectiveCall call;
    call.kind = header.kind;
    call.type = header.element_type;
    call.count = static_cast<std::size_t>(header.count);
    call.op = header.op;
    call.root = header.root;
    return describe(call);
  }

  // Checks a received header against this rank's call and the expected message size; returns
  // its flags.
  std::uint8_t check_header(int peer, const Channel& channel, std::size_t expected_bytes) {
    FrameHeader got;
    if (auto ec = decode(channel.recv_header, got, group_.chunk_bytes()))
      throw PeerFailureError(rank(), operation(),
                             fmt::format("rank {} sent an invalid message ({}); the connection "
                                         "carries something other than strata",
                                         peer, ec.message()));
    if (got.type != FrameType::data)
      throw PeerFailureError(
          rank(), operation(),
          fmt::format("rank {} sent a control message on a data connection", peer));
    const FrameHeader want = expected_header(expected_bytes);
    CollectiveCall theirs;
    theirs.kind = got.kind;
    theirs.type = got.element_type;
    theirs.count = static_cast<std::size_t>(got.count);
    theirs.op = got.op;
    theirs.root = got.root;
    if (got.sequence != want.sequence || !agrees(call_, theirs)) mismatch(peer, got);
    if (got.payload_bytes != want.payload_bytes)
      throw PeerFailureError(
          rank(), operation(),
          fmt::format("rank {} sent a {}-byte message where this rank expected {} bytes", peer,
                      got.payload_bytes, want.payload_bytes),
          "run the same strata version on every rank");
    return got.flags;
  }

  // Reads the control connections that have something to say, waiting at most `timeout_ms`.
  void poll_control(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank() || group_.peers_[static_cast<std::size_t>(peer)].closed) continue;
      fds.push_back({group_.mesh_->fd(peer, 0), POLLIN, 0});
      owners.push_back(peer);
    }
    if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    try {
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents != 0) read_control(owners[i], /*inside_call=*/true);
    } catch (...) {
      group_.fail(std::current_exception());
      throw;
    }
  }

  // Payload bytes this rank lent `peer` in this call that the peer has not read yet.
  std::uint64_t unreleased(int peer) const noexcept {
    const auto& state = group_.peers_[static_cast<std::size_t>(peer)];
    return state.lent_bytes - state.released_bytes;  // read_control keeps released <= lent
  }

  // After a failure, before the caller gets its buffer back: waits, for a grace period at
  // most, until each peer has read what this rank lent it or has failed too (its abort or its
  // closed connection: it reads no more). A peer still reading then gets the pages as they
  // were; one that reads after the grace sees this rank's abort first (see transfer).
  void await_releases_after_failure() noexcept {
    const auto until = Clock::now() + failure_grace();
    try {
      for (;;) {
        std::vector<pollfd> fds;
        std::vector<int> owners;
        for (int peer = 0; peer < size(); ++peer) {
          const auto& state = group_.peers_[static_cast<std::size_t>(peer)];
          // Only a message sent whole can be read, and released.
          if (peer == rank() || state.closed || state.released_bytes >= state.lent_sent_bytes)
            continue;
          fds.push_back({group_.mesh_->fd(peer, 0), POLLIN, 0});
          owners.push_back(peer);
        }
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
        if (fds.empty() || left <= 0) return;
        if (::poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) return;
        for (std::size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents == 0) continue;
          try {
            read_control(owners[i], /*inside_call=*/true);
          } catch (const Error&) {  // the peer failed too: it marked itself closed
          }
        }
      }
    } catch (...) {  // out of memory for the poll set: give up waiting, the failure stands
    }
  }

  // Long enough for a busy peer to be scheduled and answer, short next to the deadline.
  std::chrono::milliseconds failure_grace() const noexcept {
    return std::clamp<std::chrono::milliseconds>(
        deadline_.budget() / 10, std::chrono::milliseconds(250), std::chrono::milliseconds(2000));
  }

  [[noreturn]] void timed_out(const std::vector<int>& waiting_for) {
    // Ask every peer whether it is alive; those inside a call answer at once. The silent ones
    // are the stalled ranks, which is what the message must name.
    for (auto& state : group_.peers_)
      state.heard = false;
    group_.broadcast_control(FrameType::timeout_notice, {});
    const auto until = Clock::now() + failure_grace();
    auto unheard = [&] {
      for (int peer = 0; peer < size(); ++peer) {
        const auto& state = group_.peers_[static_cast<std::size_t>(peer)];
        if (peer != rank() && !state.closed && !state.heard) return true;
      }
      return false;
    };
    while (unheard()) {
      // Every peer's control connection, not only the unheard ones': a peer whose deadline
      // expired just after this rank's asks too, and must get its answer.
      std::vector<pollfd> fds;
      std::vector<int> owners;
      for (int peer = 0; peer < size(); ++peer) {
        if (peer == rank() || group_.peers_[static_cast<std::size_t>(peer)].closed) continue;
        fds.push_back({group_.mesh_->fd(peer, 0), POLLIN, 0});
        owners.push_back(peer);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) break;
      if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) break;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!group_.peers_[static_cast<std::size_t>(owners[i])].heard) {
          read_control(owners[i], /*inside_call=*/true);
          continue;
        }
        // A peer that has answered is read only to answer it: that it then timed out too,
        // and said so or closed, is not this rank's report.
        try {
          read_control(owners[i], /*inside_call=*/true);
        } catch (const Error&) {
        }
      }
    }
    std::vector<int> silent;
    for (int peer = 0; peer < size(); ++peer) {
      const auto& state = group_.peers_[static_cast<std::size_t>(peer)];
      if (peer != rank() && !state.heard && !state.departed) silent.push_back(peer);
    }
    std::string what = fmt::format("{} (collective #{}) did not complete within {} ms",
                                   describe(call_), sequence_, deadline_.budget().count());
    if (!silent.empty())
      fmt::format_to(std::back_inserter(what),
                     "; {} {} did not answer (stopped, hung, or not inside a collective)",
                     silent.size() == 1 ? "rank" : "ranks", fmt::join(silent, ", "));
    if (!waiting_for.empty())
      fmt::format_to(std::back_inserter(what), "; this rank was waiting for {} {}",
                     waiting_for.size() == 1 ? "rank" : "ranks", fmt::join(waiting_for, ", "));
    for (int peer = 0; peer < size(); ++peer)
      if (unreleased(peer) > 0)
        fmt::format_to(std::back_inserter(what),
                       "; rank {} had not read {} of the bytes this rank lent it", peer,
                       unreleased(peer));
    throw TimeoutError(rank(), operation(), what);
  }

  Group& group_;
  CollectiveCall call_;
  std::uint64_t sequence_;
  Deadline deadline_;
  // Set while a finished call reads its lenders' control connections (see transfer).
  bool checking_lender_ = false;
};

template <class OnReceived>
void Link::transfer(std::span<const transport::SendStep> sends,
                    std::span<const transport::RecvStep> recvs, OnReceived&& on_received) {
  if (group_.failed()) group_.raise_failure(operation());
  // A peer may have failed the group while this rank was away (a broadcast root returns
  // without hearing from anyone): a plan that receives learns it from the closed data
  // connections and, when it waits, from the control connections it polls; one that only
  // sends asks now, rather than succeed on a failed group. (The question is a system call,
  // 5-10% of a small all-reduce.)
  if (recvs.empty()) poll_control(0);
  const int data_connections = group_.data_connections();
  // Channel (peer, k) carries the peer's messages number k, k + K, k + 2K, ... in each
  // direction; both ends count the same way.
  std::vector<Channel> channels(static_cast<std::size_t>(size() * data_connections));
  auto channel_of = [&](int peer, std::size_t ordinal) -> Channel& {
    return channels[static_cast<std::size_t>(peer * data_connections) +
                    ordinal % static_cast<std::size_t>(data_connections)];
  };
  {
    std::vector<std::size_t> send_ordinal(static_cast<std::size_t>(size()), 0);
    std::vector<std::size_t> recv_ordinal(static_cast<std::size_t>(size()), 0);
    for (std::size_t i = 0; i < sends.size(); ++i)
      channel_of(sends[i].peer, send_ordinal[static_cast<std::size_t>(sends[i].peer)]++)
          .sends.push_back(i);
    for (std::size_t j = 0; j < recvs.size(); ++j)
      channel_of(recvs[j].peer, recv_ordinal[static_cast<std::size_t>(recvs[j].peer)]++)
          .recvs.push_back(j);
    for (int peer = 0; peer < size(); ++peer)
      for (int k = 0; k < data_connections; ++k) {
        auto& channel = channels[static_cast<std::size_t>(peer * data_connections + k)];
        channel.peer = peer;
        channel.connection = 1 + k;
        channel.fd = peer == rank() ? -1 : group_.mesh_->fd(peer, channel.connection);
      }
  }
  std::erase_if(channels, [](const Channel& c) { return c.sends.empty() && c.recvs.empty(); });

  // In a call that sends lend_from_bytes() or more, large sends are lent unless a receive
  // waits for them: such a receive overwrites what the send read, which the peer may not have
  // read yet.
  std::vector<char> lend(sends.size(), 0);
  std::size_t send_bytes = 0;
  for (const SendStep& step : sends)
    send_bytes += step.bytes;
  if (send_bytes >= group_.lend_from_bytes())
    for (std::size_t i = 0; i < sends.size(); ++i)
      lend[i] = sends[i].bytes >= kLendBytes ? 1 : 0;
  for (const RecvStep& step : recvs)
    if (step.after_send >= 0) lend[static_cast<std::size_t>(step.after_send)] = 0;
  bool lends = false;
  for (auto& channel : channels) {
    if (channel.fd < 0 || std::none_of(channel.sends.begin(), channel.sends.end(),
                                       [&](std::size_t i) { return lend[i] != 0; }))
      continue;
    channel.pipe = group_.pipe_for(channel.peer, channel.connection);
    if (channel.pipe != nullptr) {
      lends = true;
      continue;
    }
    for (const std::size_t i : channel.sends)  // no pipe to be had: this connection copies
      lend[i] = 0;
  }
  std::optional<SigpipeBlocked> sigpipe_blocked;
  if (lends) sigpipe_blocked.emplace();
  // Per peer: payload bytes read from it out of its memory. What this rank lent each peer, and
  // what the peer read of it, the control connections' state counts (read_control checks it).
  std::vector<std::uint64_t> read_lent(static_cast<std::size_t>(size()), 0);
  for (auto& state : group_.peers_) {
    state.lent_bytes = 0;
    state.lent_sent_bytes = 0;
    state.released_bytes = 0;
  }
  auto awaiting_release = [&] {
    for (int peer = 0; peer < size(); ++peer)
      if (unreleased(peer) > 0) return true;
    return false;
  };
  // A lent send starts only while the peer has read all but kLendWindowBytes of what it was
  // lent: the receiver's socket then never holds more than that of this rank's pages.
  auto window_full = [&](const Channel& channel, std::size_t i) {
    if (lend[i] == 0 || channel.started) return false;
    const std::uint64_t outstanding = unreleased(channel.peer);
    return outstanding > 0 && outstanding + sends[i].bytes > kLendWindowBytes;
  };

  std::vector<char> send_done(sends.size(), 0);
  std::vector<char> recv_in(recvs.size(), 0);
  std::vector<char> recv_processed(recvs.size(), 0);
  std::size_t sends_left = sends.size();
  std::size_t recvs_left = recvs.size();
  std::vector<std::size_t> deferred;  // receives that are in but wait for their send

  auto send_ready = [&](std::size_t i) {
    return sends[i].after_recv < 0 ||
           recv_processed[static_cast<std::size_t>(sends[i].after_recv)] != 0;
  };
  auto process = [&](std::size_t j) {
    on_received(j);
    recv_processed[j] = 1;
    --recvs_left;
  };
  auto handler_ready = [&](std::size_t j) {
    const RecvStep& step = recvs[j];
    return (step.after_send < 0 || send_done[static_cast<std::size_t>(step.after_send)] != 0) &&
           (step.after_recv < 0 || recv_processed[static_cast<std::size_t>(step.after_recv)] != 0);
  };
  auto try_process = [&](std::size_t j) {
    if (!handler_ready(j)) {
      deferred.push_back(j);
      return;
    }
    process(j);
  };

  std::vector<pollfd> fds;
  std::vector<int> fd_peer;  // -1: the wake fd; peer for control fds; -2 - index for channels
  auto busy_until = Clock::now() + kBusyPoll;
  try {
    while (sends_left > 0 || recvs_left > 0 || awaiting_release()) {
      if (group_.failed()) group_.raise_failure(operation());
      bool progressed = false;
      for (auto& channel : channels) {
        // Sends: as much as the socket takes.
        while (channel.next_send < channel.sends.size()) {
          const std::size_t i = channel.sends[channel.next_send];
          if (!send_ready(i)) break;
          if (window_full(channel, i)) {
            read_control(channel.peer, /*inside_call=*/true);  // a release may be waiting
            if (window_full(channel, i)) break;
          }
          const SendStep& step = sends[i];
          if (!channel.started) {
            // Pages vmsplice(2) cannot pin (device or I/O mappings) are copied instead: the
            // first part goes into the pipe before the header says "lent".
            if (lend[i] != 0 && !fill_pipe(channel, step)) lend[i] = 0;
            FrameHeader header = expected_header(step.bytes);
            if (lend[i] != 0) {
              header.flags = static_cast<std::uint8_t>(FrameFlag::lent);
              group_.peers_[static_cast<std::size_t>(channel.peer)].lent_bytes += step.bytes;
            }
            channel.send_header = encode(header);
            channel.started = true;
          }
          if (!(lend[i] != 0 ? send_lent(channel, step) : send_copied(channel, step))) break;
          if (lend[i] != 0)
            group_.peers_[static_cast<std::size_t>(channel.peer)].lent_sent_bytes += step.bytes;
          // The peer's releases, read as its lent messages go out: left unread until the end
          // of a long call they could fill the control connection, and one would be lost.
          if (lend[i] != 0) read_control(channel.peer, /*inside_call=*/true);
          channel.started = false;
          channel.sent = 0;
          channel.lent = 0;
          ++channel.next_send;
          send_done[i] = 1;
          --sends_left;
          progressed = true;
          if (step.bytes >= kYieldAfterSendBytes && group_.ranks_share_cpus()) ::sched_yield();
        }
        // Receives: the header first, checked against this rank's call, then the payload
        // straight into its destination.
        while (channel.next_recv < channel.recvs.size()) {
          const std::size_t j = channel.recvs[channel.next_recv];
          const RecvStep& step = recvs[j];
          if (channel.header_got < kFrameHeaderBytes) {
            // Header and payload in one recvmsg: a small message costs one system call. The
            // payload lands before its header is checked, but a header that does not match
            // fails the call, and the destination belongs to this call either way.
            iovec parts[2] = {{channel.recv_header.data() + channel.header_got,
                               kFrameHeaderBytes - channel.header_got},
                              {step.data, step.bytes}};
            msghdr message{};
            message.msg_iov = parts;
            message.msg_iovlen = step.bytes == 0 ? 1 : 2;
            const auto n = ::recvmsg(channel.fd, &message, MSG_DONTWAIT);
            if (n == 0) peer_closed(channel.peer);
            if (n < 0) {
              if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
              if (errno == EFAULT) bad_buffer("receive");
              peer_closed(channel.peer);
            }
            const auto got = static_cast<std::size_t>(n);
            const std::size_t header_part = std::min(got, kFrameHeaderBytes - channel.header_got);
            channel.header_got += header_part;
            channel.payload_got = got - header_part;
            if (channel.header_got < kFrameHeaderBytes) break;
            channel.recv_lent = (check_header(channel.peer, channel, step.bytes) &
                                 static_cast<std::uint8_t>(FrameFlag::lent)) != 0;
          }
          if (channel.payload_got < step.bytes) {
            const auto n = ::recv(channel.fd, step.data + channel.payload_got,
                                  step.bytes - channel.payload_got, MSG_DONTWAIT);
            if (n == 0) peer_closed(channel.peer);
            if (n < 0) {
              if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
              if (errno == EFAULT) bad_buffer("receive");
              peer_closed(channel.peer);
            }
            channel.payload_got += static_cast<std::size_t>(n);
            if (channel.payload_got < step.bytes) break;
          }
          channel.header_got = 0;
          channel.payload_got = 0;
          ++channel.next_recv;
          if (channel.recv_lent) {
            auto& read = read_lent[static_cast<std::size_t>(channel.peer)];
            read += step.bytes;
            group_.send_control(channel.peer, FrameType::release, {}, sequence_, read);
          }
          recv_in[j] = 1;
          try_process(j);
          progressed = true;
        }
      }
      if (!deferred.empty()) {
        const auto before = deferred.size();
        std::erase_if(deferred, [&](std::size_t j) {
          if (!handler_ready(j)) return false;
          process(j);
          return true;
        });
        progressed = progressed || deferred.size() != before;
      }
      if (progressed || (sends_left == 0 && recvs_left == 0 && !awaiting_release())) {
        busy_until = Clock::now() + kBusyPoll;
        continue;
      }

      // Nothing moved: wait for the sockets, the control connections, abort() or the deadline.
      fds.clear();
      fd_peer.clear();
      fds.push_back({group_.wake_fd_, POLLIN, 0});
      fd_peer.push_back(-1);
      for (int peer = 0; peer < size(); ++peer) {
        const auto& state = group_.peers_[static_cast<std::size_t>(peer)];
        if (peer == rank() || state.closed) continue;
        fds.push_back({group_.mesh_->fd(peer, 0), POLLIN, 0});
        fd_peer.push_back(peer);
      }
      for (std::size_t c = 0; c < channels.size(); ++c) {
        const auto& channel = channels[c];
        short events = 0;
        if (channel.next_recv < channel.recvs.size()) events |= POLLIN;
        if (channel.next_send < channel.sends.size() &&
            send_ready(channel.sends[channel.next_send]) &&
            !window_full(channel, channel.sends[channel.next_send]))
          events |= POLLOUT;
        if (events == 0) continue;
        fds.push_back({channel.fd, events, 0});
        fd_peer.push_back(-2 - static_cast<int>(c));
      }
      // A peer's answer usually comes within microseconds, and waking from a sleeping poll(2)
      // costs far more: ask first without sleeping, yielding in between so that ranks sharing
      // a core (more ranks than cores) run. Asking poll(2), not retrying recv(2), matters:
      // recv takes the socket lock that the sender's softirq needs to deliver the data.
      int ready = 0;
      while (Clock::now() < busy_until) {
        ready = ::poll(fds.data(), fds.size(), 0);
        if (ready != 0) break;
        ::sched_yield();
      }
      if (ready == 0) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(deadline_.time_point() - Clock::now());
        ready = left.count() <= 0
                    ? 0
                    : ::poll(fds.data(), fds.size(),
                             static_cast<int>(std::min<long long>(left.count(), 1'000'000)));
      }
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0 && deadline_.expired()) {
        std::vector<int> waiting_for;
        for (const auto& channel : channels)
          if (channel.next_recv < channel.recvs.size() || channel.next_send < channel.sends.size())
            waiting_for.push_back(channel.peer);
        for (int peer = 0; peer < size(); ++peer)
          if (unreleased(peer) > 0) waiting_for.push_back(peer);
        std::sort(waiting_for.begin(), waiting_for.end());
        waiting_for.erase(std::unique(waiting_for.begin(), waiting_for.end()), waiting_for.end());
        timed_out(waiting_for);
      }
      for (std::size_t k = 0; k < fds.size(); ++k)
        if (fd_peer[k] >= 0 && fds[k].revents != 0) read_control(fd_peer[k], /*inside_call=*/true);
    }
    // A lender that failed returns without waiting for every release (at most a grace
    // period), and its caller may then overwrite pages this rank read last. It says so before
    // it returns: what this rank read may be wrong if that word is here now.
    checking_lender_ = true;
    for (int peer = 0; peer < size(); ++peer)
      if (read_lent[static_cast<std::size_t>(peer)] > 0) read_control(peer, /*inside_call=*/true);
  } catch (...) {
    checking_lender_ = false;
    group_.fail(std::current_exception());
    if (awaiting_release()) await_releases_after_failure();
    throw;
  }
}

}  // namespace strata::transport::tcp
