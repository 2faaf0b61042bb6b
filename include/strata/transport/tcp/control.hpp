// strata/transport/tcp/control.hpp — one call's side of the control connections: what the
// peers say while the call runs, and the call's failures explained.
//
// While it waits, a call watches every peer's control connection (connection 0): an abort
// message, a closed connection (a killed process) or the deadline ends the call on every rank
// within milliseconds, with the error type of the rank that failed first. The same connections
// carry the releases of lent pages (lending.hpp), counted here per peer, and, at the deadline,
// the question "are you alive?" whose silent peers the TimeoutError names.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <poll.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/detail/escape.hpp>
#include <strata/core/detail/join.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/group.hpp>

namespace strata::transport::tcp {

/// One collective call's reading of the control connections, and the errors that name it.
class CallControl {
 public:
  CallControl(Group& group, const CollectiveCall& call, std::uint64_t sequence, Deadline deadline)
      : group_(group), call_(call), sequence_(sequence), deadline_(deadline) {}

  Group& group() const noexcept { return group_; }
  const CollectiveCall& call() const noexcept { return call_; }
  std::uint64_t sequence() const noexcept { return sequence_; }
  Deadline deadline() const noexcept { return deadline_; }
  int rank() const noexcept { return group_.rank(); }
  int size() const noexcept { return group_.size(); }
  std::string_view operation() const noexcept { return to_string(call_.kind); }
  /// Set while a finished call reads its lenders' control connections (see PlanRun::run).
  void checking_lender(bool checking) noexcept { checking_lender_ = checking; }

  /// Reads whatever control frames `peer` sent; raises on an abort message or on a close
  /// without goodbye.
  void read(int peer, bool inside_call) {
    auto& state = group_.peer_state(peer);
    const int fd = group_.mesh().fd(peer, 0);
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
              RootCause{peer, fmt::format("rank {} sent an invalid control message ({})", peer,
                                          ec.message())});
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
      if (!on_frame(peer, header, payload, inside_call)) return;
    }
  }

  /// Reads the control connections that have something to say, waiting at most `timeout_ms`.
  void poll(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int peer = 0; peer < size(); ++peer) {
      if (peer == rank() || group_.peer_state(peer).closed) continue;
      fds.push_back({group_.mesh().fd(peer, 0), POLLIN, 0});
      owners.push_back(peer);
    }
    if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    try {
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents != 0) read(owners[i], /*inside_call=*/true);
    } catch (...) {
      group_.fail(std::current_exception());
      throw;
    }
  }

  /// Payload bytes this rank lent `peer` in this call that the peer has not read yet.
  std::uint64_t unreleased(int peer) const noexcept {
    const auto& state = group_.peer_state(peer);
    return state.lent_bytes - state.released_bytes;  // read() keeps released <= lent
  }

  /// A data connection to `peer` closed: says why, from what the peer said on its control
  /// connection just before closing (given a moment to arrive).
  [[noreturn]] void peer_closed(int peer) {
    const auto until =
        std::min(deadline_.time_point(), Clock::now() + std::chrono::milliseconds(200));
    auto& control = group_.peer_state(peer);
    while (!control.closed && Clock::now() < until) {
      pollfd fd{group_.mesh().fd(peer, 0), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (::poll(&fd, 1, static_cast<int>(std::max<long long>(1, left.count()))) <= 0) break;
      read(peer, /*inside_call=*/true);
    }
    if (control.departed)
      throw PeerFailureError(rank(), operation(),
                             RootCause{peer, fmt::format("rank {} closed its communicator while "
                                                         "rank {} still expected data from it "
                                                         "in collective #{}",
                                                         peer, rank(), sequence_)},
                             "every rank must call the same collectives the same number of times");
    throw PeerFailureError(rank(), operation(),
                           RootCause{peer, fmt::format("rank {} closed its connections in "
                                                       "collective #{} (the process exited, "
                                                       "crashed or was killed)",
                                                       peer, sequence_)});
  }

  /// After a failure, before the caller gets its buffer back: waits, for a grace period at
  /// most, until each peer has read what this rank lent it or has failed too (its abort or its
  /// closed connection: it reads no more). A peer still reading then gets the pages as they
  /// were; one that reads after the grace sees this rank's abort first (see PlanRun::run).
  void await_releases_after_failure() noexcept {
    const auto until = Clock::now() + failure_grace();
    try {
      for (;;) {
        std::vector<pollfd> fds;
        std::vector<int> owners;
        for (int peer = 0; peer < size(); ++peer) {
          const auto& state = group_.peer_state(peer);
          // Only a message sent whole can be read, and released.
          if (peer == rank() || state.closed || state.released_bytes >= state.lent_sent_bytes)
            continue;
          fds.push_back({group_.mesh().fd(peer, 0), POLLIN, 0});
          owners.push_back(peer);
        }
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
        if (fds.empty() || left <= 0) return;
        if (::poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) return;
        for (std::size_t i = 0; i < fds.size(); ++i) {
          if (fds[i].revents == 0) continue;
          try {
            read(owners[i], /*inside_call=*/true);
          } catch (const Error&) {  // the peer failed too: it marked itself closed
          }
        }
      }
    } catch (...) {  // out of memory for the poll set: give up waiting, the failure stands
    }
  }

  /// The deadline passed: asks every peer whether it is alive and raises a TimeoutError that
  /// names the silent ones and those this rank was `waiting_for`.
  [[noreturn]] void timed_out(const std::vector<int>& waiting_for) {
    // Ask every peer whether it is alive; those inside a call answer at once. The silent ones
    // are the stalled ranks, which is what the message must name.
    for (auto& state : group_.peer_states())
      state.heard = false;
    group_.broadcast_control(FrameType::timeout_notice, {});
    const auto until = Clock::now() + failure_grace();
    while (unheard()) {
      // Every peer's control connection, not only the unheard ones': a peer whose deadline
      // expired just after this rank's asks too, and must get its answer.
      std::vector<pollfd> fds;
      std::vector<int> owners;
      for (int peer = 0; peer < size(); ++peer) {
        if (peer == rank() || group_.peer_state(peer).closed) continue;
        fds.push_back({group_.mesh().fd(peer, 0), POLLIN, 0});
        owners.push_back(peer);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) break;
      if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) break;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!group_.peer_state(owners[i]).heard) {
          read(owners[i], /*inside_call=*/true);
          continue;
        }
        // A peer that has answered is read only to answer it: that it then timed out too,
        // and said so or closed, is not this rank's report.
        try {
          read(owners[i], /*inside_call=*/true);
        } catch (const Error&) {
        }
      }
    }
    throw TimeoutError(rank(), operation(), timeout_text(waiting_for));
  }

 private:
  // One whole frame from `peer`'s control connection; false once nothing more is to be read
  // from it in this call.
  bool on_frame(int peer, const FrameHeader& header, std::span<const std::byte> payload,
                bool inside_call) {
    auto& state = group_.peer_state(peer);
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
          return false;
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
      case FrameType::request:
      case FrameType::reply:
        state.closed = true;
        throw PeerFailureError(
            rank(), operation(),
            RootCause{peer, fmt::format("rank {} sent data on its control connection", peer)});
    }
    return true;
  }

  // A peer failed the group: raises its root cause, with the error type of the rank where
  // the failure started.
  [[noreturn]] void raise_abort(int peer, std::span<const std::byte> payload) {
    const auto kind =
        payload.empty() ? FailureClass::peer_failure : static_cast<FailureClass>(payload[0]);
    RootCause cause{peer, {}};
    std::string text;
    if (payload.size() >= 5) {
      const auto origin = static_cast<std::int32_t>(detail::load_le<std::uint32_t>(&payload[1]));
      if (origin >= -1 && origin < size()) cause.rank = origin;
      text.assign(reinterpret_cast<const char*>(payload.data() + 5), payload.size() - 5);
    }
    // The text is the peer's bytes: escaped, so that no control character or invalid UTF-8
    // reaches this rank's logs.
    cause.what_happened = text.empty() ? fmt::format("rank {} failed the group", peer)
                                       : strata::detail::escaped(text, text.size());
    switch (kind) {
      case FailureClass::mismatch:
        throw MismatchError(rank(), operation(), std::move(cause));
      case FailureClass::timeout:
        throw TimeoutError(rank(), operation(), std::move(cause));
      case FailureClass::peer_failure:
        break;
    }
    throw PeerFailureError(rank(), operation(), std::move(cause));
  }

  [[noreturn]] void peer_closed_control(int peer) {
    throw PeerFailureError(rank(), operation(),
                           RootCause{peer, fmt::format("rank {} closed its connections without "
                                                       "saying why in collective #{} (the process "
                                                       "exited, crashed or was killed)",
                                                       peer, sequence_)});
  }

  // Long enough for a busy peer to be scheduled and answer, short next to the deadline.
  std::chrono::milliseconds failure_grace() const noexcept {
    return std::clamp<std::chrono::milliseconds>(
        deadline_.budget() / 10, std::chrono::milliseconds(250), std::chrono::milliseconds(2000));
  }

  // Some peer has not answered this rank's timeout notice yet.
  bool unheard() {
    for (int peer = 0; peer < size(); ++peer) {
      const auto& state = group_.peer_state(peer);
      if (peer != rank() && !state.closed && !state.heard) return true;
    }
    return false;
  }

  std::string timeout_text(const std::vector<int>& waiting_for) {
    std::vector<int> silent;
    for (int peer = 0; peer < size(); ++peer) {
      const auto& state = group_.peer_state(peer);
      if (peer != rank() && !state.heard && !state.departed) silent.push_back(peer);
    }
    std::string what = fmt::format("{} (collective #{}) did not complete within {} ms",
                                   describe(call_), sequence_, deadline_.budget().count());
    if (!silent.empty())
      what +=
          fmt::format("; {} {} did not answer (stopped, hung, or not inside a collective)",
                      silent.size() == 1 ? "rank" : "ranks", strata::detail::join(silent, ", "));
    if (!waiting_for.empty())
      what += fmt::format("; rank {} was waiting for {} {}", rank(),
                          waiting_for.size() == 1 ? "rank" : "ranks",
                          strata::detail::join(waiting_for, ", "));
    for (int peer = 0; peer < size(); ++peer)
      if (unreleased(peer) > 0)
        what += fmt::format("; rank {} had not read {} of the bytes rank {} lent it", peer,
                            unreleased(peer), rank());
    return what;
  }

  Group& group_;
  CollectiveCall call_;
  std::uint64_t sequence_;
  Deadline deadline_;
  bool checking_lender_ = false;
};

}  // namespace strata::transport::tcp
