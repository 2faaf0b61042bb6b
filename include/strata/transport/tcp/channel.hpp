// strata/transport/tcp/channel.hpp — one data connection in one call: its share of the plan
// and the non-blocking socket I/O that moves it.
//
// Channel (peer, k) carries the peer's messages number k, k + K, k + 2K, ... in each direction
// (K data connections per peer); both ends count the same way, so messages between two ranks
// keep their order per channel and need no tag. Every message is a frame header (frame.hpp)
// followed by its payload. A send goes out in one sendmsg when copied, or header first and then
// the payload's pages through the channel's pipe when lent (lending.hpp). A receive reads header
// and payload in one recvmsg, checks the header against this rank's call, and reads the rest of
// the payload straight into its destination.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <fmt/format.h>

#include <strata/core/collective.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/plan.hpp>
#include <strata/transport/tcp/control.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/lending.hpp>

namespace strata::transport::tcp {

/// The header of this call's data messages of `bytes` payload bytes.
inline FrameHeader data_header(const CallControl& control, std::size_t bytes) noexcept {
  const CollectiveCall& call = control.call();
  FrameHeader header;
  header.type = FrameType::data;
  header.kind = call.kind;
  header.element_type = call.type;
  header.op = call.op;
  header.root = call.root;
  header.payload_bytes = static_cast<std::uint32_t>(bytes);
  header.sequence = control.sequence();
  header.count = call.count;
  return header;
}

/// One data connection's progress through the plan of one call.
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
  Pipe* pipe = nullptr;
  FrameBytes send_header{};
  std::size_t header_got = 0;
  std::size_t payload_got = 0;
  FrameBytes recv_header{};

  static bool would_block() noexcept {
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }

  // Writes as much of `step` (header and payload, one sendmsg) as the socket takes; true once
  // all of it is written.
  bool send_copied(const SendStep& step, CallControl& control) {
    iovec parts[2];
    int count = 0;
    if (sent < kFrameHeaderBytes)
      parts[count++] = {send_header.data() + sent, kFrameHeaderBytes - sent};
    const std::size_t payload_sent = sent > kFrameHeaderBytes ? sent - kFrameHeaderBytes : 0;
    if (payload_sent < step.bytes)
      parts[count++] = {const_cast<std::byte*>(step.data) + payload_sent,
                        step.bytes - payload_sent};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(count);
    const auto n = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (would_block()) return false;
      if (errno == EFAULT) bad_buffer(control, "send");
      control.peer_closed(peer);
    }
    sent += static_cast<std::size_t>(n);
    return sent == kFrameHeaderBytes + step.bytes;
  }

  // Like send_copied, but the payload's pages go to the socket through the channel's pipe
  // instead of being copied into it.
  bool send_lent(const SendStep& step, CallControl& control) {
    if (sent < kFrameHeaderBytes) {
      const auto n = ::send(fd, send_header.data() + sent, kFrameHeaderBytes - sent,
                            MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
      if (n < 0) {
        if (would_block()) return false;
        control.peer_closed(peer);
      }
      sent += static_cast<std::size_t>(n);
      if (sent < kFrameHeaderBytes) return false;
    }
    for (;;) {
      const std::size_t written = sent - kFrameHeaderBytes;
      if (written == step.bytes) return true;
      if (!fill_pipe(step))
        throw UsageError(control.rank(), control.operation(),
                         fmt::format("vmsplice of the send buffer failed at byte {} of {}: {}",
                                     lent, step.bytes, std::generic_category().message(errno)),
                         "pass buffers that stay valid for the whole call, or turn lending "
                         "off (TcpOptions::lend_from_bytes = SIZE_MAX)");
      const unsigned more = lent < step.bytes ? SPLICE_F_MORE : 0;
      const auto n = ::splice(pipe->read, nullptr, fd, nullptr, lent - written,
                              SPLICE_F_NONBLOCK | SPLICE_F_MOVE | more);
      if (n < 0) {
        if (would_block()) return false;
        control.peer_closed(peer);
      }
      if (n == 0) return false;
      sent += static_cast<std::size_t>(n);
    }
  }

  // Lends the pipe as much of the payload as it takes; false when vmsplice(2) refused the
  // pages (errno says why), not merely found the pipe full.
  bool fill_pipe(const SendStep& step) {
    // The pipe counts pages, not bytes: vmsplice takes less than asked when the payload is not
    // page-aligned, and nothing when the pipe is full.
    const std::size_t in_pipe = lent - (sent - std::min(sent, kFrameHeaderBytes));
    if (lent == step.bytes || in_pipe >= pipe->capacity) return true;
    iovec part{const_cast<std::byte*>(step.data) + lent,
               std::min(step.bytes - lent, pipe->capacity - in_pipe)};
    const auto n = ::vmsplice(pipe->write, &part, 1, SPLICE_F_NONBLOCK);
    if (n > 0) lent += static_cast<std::size_t>(n);
    return n >= 0 || would_block();
  }

  // Reads the head receive's header, and as much of its payload as came with it; true once the
  // header is in and agrees with this rank's call.
  bool receive_header(const RecvStep& step, CallControl& control) {
    // Header and payload in one recvmsg: a small message costs one system call. The payload
    // lands before its header is checked, but a header that does not match fails the call, and
    // the destination belongs to this call either way.
    iovec parts[2] = {{recv_header.data() + header_got, kFrameHeaderBytes - header_got},
                      {step.data, step.bytes}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = step.bytes == 0 ? 1 : 2;
    const auto n = ::recvmsg(fd, &message, MSG_DONTWAIT);
    if (n == 0) control.peer_closed(peer);
    if (n < 0) {
      if (would_block()) return false;
      if (errno == EFAULT) bad_buffer(control, "receive");
      control.peer_closed(peer);
    }
    const auto got = static_cast<std::size_t>(n);
    const std::size_t header_part = std::min(got, kFrameHeaderBytes - header_got);
    header_got += header_part;
    payload_got = got - header_part;
    if (header_got < kFrameHeaderBytes) return false;
    recv_lent =
        (check_header(control, step.bytes) & static_cast<std::uint8_t>(FrameFlag::lent)) != 0;
    return true;
  }

  // Reads the rest of the head receive's payload; true once all of it is in.
  bool receive_payload(const RecvStep& step, CallControl& control) {
    const auto n = ::recv(fd, step.data + payload_got, step.bytes - payload_got, MSG_DONTWAIT);
    if (n == 0) control.peer_closed(peer);
    if (n < 0) {
      if (would_block()) return false;
      if (errno == EFAULT) bad_buffer(control, "receive");
      control.peer_closed(peer);
    }
    payload_got += static_cast<std::size_t>(n);
    return payload_got >= step.bytes;
  }

 private:
  // Checks the received header against this rank's call and the expected message size;
  // returns its flags.
  std::uint8_t check_header(const CallControl& control, std::size_t expected_bytes) const {
    FrameHeader got;
    if (auto ec = decode(recv_header, got, control.group().chunk_bytes()))
      throw PeerFailureError(control.rank(), control.operation(),
                             RootCause{peer, fmt::format("rank {} sent an invalid message ({}); "
                                                         "the connection carries something "
                                                         "other than strata",
                                                         peer, ec.message())});
    if (got.type != FrameType::data)
      throw PeerFailureError(
          control.rank(), control.operation(),
          RootCause{peer,
                    fmt::format("rank {} sent a control message on a data connection", peer)});
    const FrameHeader want = data_header(control, expected_bytes);
    CollectiveCall theirs;
    theirs.kind = got.kind;
    theirs.type = got.element_type;
    theirs.count = static_cast<std::size_t>(got.count);
    theirs.op = got.op;
    theirs.root = got.root;
    if (got.sequence != want.sequence || !agrees(control.call(), theirs)) mismatch(control, got);
    if (got.payload_bytes != want.payload_bytes)
      throw PeerFailureError(
          control.rank(), control.operation(),
          RootCause{peer, fmt::format("rank {} sent a {}-byte message where rank {} expected {} "
                                      "bytes",
                                      peer, got.payload_bytes, control.rank(), want.payload_bytes)},
          "run the same strata version on every rank");
    return got.flags;
  }

  [[noreturn]] void mismatch(const CallControl& control, const FrameHeader& got) const {
    const std::uint64_t sequence = control.sequence();
    if (got.sequence != sequence)
      throw MismatchError(
          control.rank(), control.operation(),
          fmt::format("rank {} sent data for its collective #{} ({}) while rank {} is in "
                      "collective #{} ({})",
                      peer, got.sequence, describe_header(got), control.rank(), sequence,
                      describe(control.call())),
          "every rank must call the same collectives in the same order; one rank called more "
          "or fewer than the others");
    throw MismatchError(control.rank(), control.operation(),
                        fmt::format("ranks disagree on collective #{}: rank {} called {} but "
                                    "rank {} called {}",
                                    sequence, control.rank(), describe(control.call()), peer,
                                    describe_header(got)));
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

  [[noreturn]] static void bad_buffer(const CallControl& control, std::string_view which) {
    throw UsageError(
        control.rank(), control.operation(),
        fmt::format("the {} buffer is not memory this process may use (EFAULT)", which),
        "pass buffers that stay valid for the whole call");
  }
};

}  // namespace strata::transport::tcp
