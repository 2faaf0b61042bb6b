// strata/transport/tcp/lending.hpp — lending a message's pages to the socket instead of
// copying them.
//
// Large calls lend their messages: the pages go into a pipe with vmsplice(2) and from there
// into the socket with splice(2), so the kernel copies each byte once (into the receiver's
// memory), not twice. That pays when the data streams from memory (TcpOptions::
// lend_from_bytes); out of cache, copying is cheaper than pinning pages. Since the receiver
// reads straight out of the sender's memory:
//   - the receiver tells the sender, on the control connection, each time it has read a lent
//     message (a release frame); a sender lends a peer at most kLendWindowBytes ahead of what
//     it has read, which also keeps the receiver's socket queue short (a queue that overflows
//     its receive buffer gets pruned and retransmitted), and returns only once every peer has
//     read everything;
//   - within a call, the plan keeps lent memory unchanged until it is read: a receive
//     overwrites memory a send read only after that send (`after_send`: such sends are copied)
//     or after the peer sent something that it could only send after reading it (the ring's
//     all-gather brings a chunk back once the peer has reduced what this rank lent);
//   - a sender that fails still waits, a grace period at most, for its peers to read or fail;
//     a receiver that read lent pages checks, before it returns, whether its lender said it
//     failed in this call (within one host the abort arrives before the lender returns; across
//     hosts, after the grace period, it may still be on its way).
// This file holds the pieces: which sends are lent, the pipes, and SIGPIPE kept off the
// thread while it lends. channel.hpp sends through the pipes, control.hpp counts the releases.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <strata/transport/plan.hpp>

namespace strata::transport::tcp {

/// In a call that lends (Group::lend_from_bytes), messages this large are lent; smaller ones
/// cost less to copy than to pin page by page.
inline constexpr std::size_t kLendBytes = std::size_t{64} << 10;
/// How much of its memory a rank lends one peer before that peer has read it.
inline constexpr std::uint64_t kLendWindowBytes = std::uint64_t{2} << 20;

/// Which sends of a plan may be lent (1) and which are copied (0): in a call that sends
/// `lend_from_bytes` or more, the large ones, unless a receive waits for them: such a receive
/// overwrites what the send read, which the peer may not have read yet.
inline std::vector<char> lendable_sends(std::span<const SendStep> sends,
                                        std::span<const RecvStep> recvs,
                                        std::size_t lend_from_bytes) {
  std::vector<char> lend(sends.size(), 0);
  std::size_t send_bytes = 0;
  for (const SendStep& step : sends)
    send_bytes += step.bytes;
  if (send_bytes >= lend_from_bytes)
    for (std::size_t i = 0; i < sends.size(); ++i)
      lend[i] = sends[i].bytes >= kLendBytes ? 1 : 0;
  for (const RecvStep& step : recvs)
    if (step.after_send >= 0) lend[static_cast<std::size_t>(step.after_send)] = 0;
  return lend;
}

/// Carries lent payloads from this rank's memory into one data connection.
struct Pipe {
  int read = -1;
  int write = -1;
  std::size_t capacity = 0;
};

/// The pipes of a group, one per (peer, data connection), made on first use and kept across
/// calls.
class Pipes {
 public:
  Pipes(int size, int data_connections) : size_(size), data_connections_(data_connections) {}
  Pipes(const Pipes&) = delete;
  Pipes& operator=(const Pipes&) = delete;
  ~Pipes() {
    for (const Pipe& pipe : pipes_)
      if (pipe.read >= 0) {
        ::close(pipe.read);
        ::close(pipe.write);
      }
  }

  /// The pipe of data connection `index` (1..K) to `peer`; nullptr when the system has none to
  /// give (descriptor or pipe-memory limits, vmsplice forbidden): that connection then copies.
  Pipe* pipe_for(int peer, int index) {
    if (pipes_.empty()) pipes_.resize(static_cast<std::size_t>(size_ * data_connections_));
    Pipe& pipe = pipes_[static_cast<std::size_t>(peer * data_connections_ + index - 1)];
    if (pipe.read < 0 && !refused_) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) {
        refused_ = true;
        return nullptr;
      }
      // A sandbox may forbid vmsplice(2) (seccomp): then copy, as without a pipe.
      char probe = 0;
      iovec part{&probe, 1};
      if (::vmsplice(ends[1], &part, 1, SPLICE_F_NONBLOCK) != 1 ||
          ::read(ends[0], &probe, 1) != 1) {
        ::close(ends[0]);
        ::close(ends[1]);
        refused_ = true;
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

 private:
  static constexpr std::size_t kPipeBytes = std::size_t{1} << 20;

  int size_;
  int data_connections_;
  std::vector<Pipe> pipes_;
  bool refused_ = false;
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

}  // namespace strata::transport::tcp
