// strata/transport/tcp/service_client.hpp — one client connection to a service
// (service_server.hpp): the connecting side of the handshake, then requests and replies on the
// socket itself.
//
// Connecting and the handshake use asio, one step at a time under the deadline; calls then use
// the socket directly (non-blocking send and recv, poll for the rest of the deadline): a call is
// one request and one reply, where an event loop would only add latency.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <strata/cluster/address.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/busy_poll.hpp>
#include <strata/transport/tcp/congestion.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/read_ahead.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/run_until.hpp>
#include <strata/transport/tcp/service_identity.hpp>

namespace strata::transport::tcp {

/// How a send or receive ended.
enum class ServiceIo : std::uint8_t { done, closed, timed_out, failed };

/// A connection to a service that accepted this client.
class ServiceConnection {
 public:
  using tcp = asio::ip::tcp;

  /// Connects to `address` and runs the handshake as rank `mine.rank` (the service must answer
  /// as rank `service_rank`), on connection index `lane`. Returns nothing, with the reason in
  /// `why`, when trying again may help (nobody listens yet, the connection broke).
  /// @throws ConfigurationError (operation `operation`, naming `who`) when the service refuses
  ///   this client or is not the one expected: retrying cannot help.
  static std::unique_ptr<ServiceConnection> connect(const cluster::Address& address,
                                                    const ServiceIdentity& mine, int service_rank,
                                                    std::uint16_t lane, std::uint64_t incarnation,
                                                    Clock::time_point until,
                                                    std::string_view operation,
                                                    std::string_view who, std::string& why) {
    auto connection = std::unique_ptr<ServiceConnection>(new ServiceConnection());
    if (connection->handshake(address, mine, service_rank, lane, incarnation, until, operation, who,
                              why))
      return connection;
    return nullptr;
  }

  ServiceConnection(const ServiceConnection&) = delete;
  ServiceConnection& operator=(const ServiceConnection&) = delete;

  /// Sends the header `header` and then `parts`, whole.
  ServiceIo send(const FrameHeader& header, std::span<const std::span<const std::byte>> parts,
                 Clock::time_point until) {
    const FrameBytes bytes = encode(header);
    std::array<iovec, 4> iov{};
    std::size_t count = 0;
    iov[count++] = {const_cast<std::byte*>(bytes.data()), bytes.size()};
    for (const auto& part : parts) {
      if (part.empty()) continue;
      if (count == iov.size()) return ServiceIo::failed;
      iov[count++] = {const_cast<std::byte*>(part.data()), part.size()};
    }
    std::span<iovec> left(iov.data(), count);
    while (!left.empty()) {
      msghdr message{};
      message.msg_iov = left.data();
      message.msg_iovlen = left.size();
      const auto sent = ::sendmsg(fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
          if (const ServiceIo io = wait_for(POLLOUT, until); io != ServiceIo::done) return io;
          continue;
        }
        return errno == EPIPE || errno == ECONNRESET ? ServiceIo::closed : ServiceIo::failed;
      }
      auto done = static_cast<std::size_t>(sent);
      while (!left.empty() && done >= left.front().iov_len) {
        done -= left.front().iov_len;
        left = left.subspan(1);
      }
      if (!left.empty()) {
        left.front().iov_base = static_cast<std::byte*>(left.front().iov_base) + done;
        left.front().iov_len -= done;
      }
    }
    return ServiceIo::done;
  }

  /// The socket, for a caller that polls several connections at once to learn which closed:
  /// bytes already read ahead (receive) do not make it readable.
  int native_handle() noexcept { return socket_.native_handle(); }

  /// Receives exactly `out.size()` bytes. A small read takes what has arrived, up to kReadAhead
  /// bytes, and keeps the rest for the next: a reply's header and small payload cost one
  /// recv(2).
  ServiceIo receive(std::span<std::byte> out, Clock::time_point until) {
    std::size_t got = ahead_.take(out);
    while (got < out.size()) {
      const std::size_t want = out.size() - got;
      const bool ahead = want < kReadAhead;
      const std::span<std::byte> into = ahead ? ahead_.space() : out.subspan(got);
      const auto n = ::recv(fd(), into.data(), into.size(), MSG_DONTWAIT);
      if (n > 0) {
        if (!ahead) {
          got += static_cast<std::size_t>(n);
        } else {
          ahead_.filled(static_cast<std::size_t>(n));
          got += ahead_.take(out.subspan(got));
        }
        continue;
      }
      if (n == 0) return ServiceIo::closed;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (const ServiceIo io = wait_for(POLLIN, until); io != ServiceIo::done) return io;
        continue;
      }
      return errno == ECONNRESET ? ServiceIo::closed : ServiceIo::failed;
    }
    return ServiceIo::done;
  }

 private:
  ServiceConnection() = default;

  int fd() { return socket_.native_handle(); }

  ServiceIo wait_for(short events, Clock::time_point until) {
    pollfd entry{fd(), events, 0};
    const auto busy_until = Clock::now() + kBusyPoll;
    for (;;) {
      const int ready = poll_busy_then_sleep(std::span(&entry, 1), busy_until, until);
      if (ready > 0) return ServiceIo::done;
      if (ready == 0 && Clock::now() >= until) return ServiceIo::timed_out;
      if (ready < 0 && errno != EINTR) return ServiceIo::failed;
    }
  }

  bool handshake(const cluster::Address& address, const ServiceIdentity& mine_identity,
                 int service_rank, std::uint16_t lane, std::uint64_t incarnation,
                 Clock::time_point deadline, std::string_view operation, std::string_view who,
                 std::string& why) {
    const auto refused = [&](std::string_view reason) {
      throw ConfigurationError(mine_identity.rank, operation,
                               fmt::format("{} refused this client: {}", who, reason),
                               "start every task with the same cluster spec, strata version and "
                               "STRATA_CLUSTER_TOKEN");
    };
    const std::optional<std::string>& token = mine_identity.token;
    std::error_code ec;
    const auto endpoints = resolve_endpoints<tcp>(address.host, address.port, ec);
    if (ec) {
      why = fmt::format("cannot resolve {}: {}", address.to_string(), ec.message());
      return false;
    }
    const auto until = std::min(deadline, Clock::now() + kHandshakeTimeout);
    bool timed_out = false;
    const auto step = [&](std::string_view what, auto start) {
      ec = run_until(io_, socket_, until, timed_out, start);
      if (ec)
        why = timed_out ? fmt::format("{} timed out", what)
                        : fmt::format("{}: {}", what, ec.message());
      return !ec;
    };
    const auto write = [&](asio::const_buffer bytes) {
      return step("handshake", [&](auto done) {
        asio::async_write(socket_, bytes,
                          [done](const std::error_code& e, std::size_t) { done(e); });
      });
    };
    const auto read = [&](asio::mutable_buffer bytes) {
      return step("handshake", [&](auto done) {
        asio::async_read(socket_, bytes,
                         [done](const std::error_code& e, std::size_t) { done(e); });
      });
    };
    if (!step("connect", [&](auto done) {
          asio::async_connect(socket_, endpoints,
                              [done](const std::error_code& e, const tcp::endpoint&) { done(e); });
        }))
      return false;
    Hello mine;
    mine.connection = lane;
    mine.rank = mine_identity.rank;
    mine.world_size = mine_identity.group_size;
    mine.flags = token ? Hello::kHasToken : 0;
    mine.cluster = mine_identity.cluster;
    mine.tunables = mine_identity.tunables;
    mine.incarnation = incarnation;
    random_bytes(mine.nonce);
    const HelloBytes mine_bytes = encode(mine);
    std::array<std::byte, 1> status{};
    if (!write(asio::buffer(mine_bytes)) || !read(asio::buffer(status))) return false;
    if (!is_handshake_status(status[0]))
      refused("it answered with bytes that are not a strata handshake");
    std::array<std::byte, kNonceBytes> challenge{};
    if (static_cast<HandshakeStatus>(status[0]) == HandshakeStatus::challenge) {
      if (!token) refused("it asks for a cluster token (STRATA_CLUSTER_TOKEN) this client lacks");
      if (!read(asio::buffer(challenge))) return false;
      const Mac mac = handshake_mac(*token, "strata-connect", mine_bytes, challenge);
      if (!write(asio::buffer(mac)) || !read(asio::buffer(status))) return false;
    } else if (token && static_cast<HandshakeStatus>(status[0]) == HandshakeStatus::accepted) {
      refused("it accepted this client without checking the cluster token");
    }
    if (static_cast<HandshakeStatus>(status[0]) != HandshakeStatus::accepted)
      refused(to_string(static_cast<HandshakeStatus>(status[0])));
    std::array<std::byte, kHelloBytes + kMacBytes> reply{};
    if (!read(asio::buffer(reply.data(), kHelloBytes + (token ? kMacBytes : 0)))) return false;
    HelloBytes theirs_bytes{};
    std::copy_n(reply.begin(), kHelloBytes, theirs_bytes.begin());
    Hello theirs;
    HandshakeStatus verdict = HandshakeStatus::accepted;
    if (!decode(std::span<const std::byte, kHelloBytes>(theirs_bytes), theirs) ||
        theirs.version != kProtocolVersion)
      verdict = HandshakeStatus::bad_version;
    else if (theirs.tunables != mine_identity.tunables)
      verdict = HandshakeStatus::tunables_differ;
    else if (theirs.cluster != mine_identity.cluster)
      verdict = HandshakeStatus::other_cluster;
    else if (theirs.rank != service_rank)
      verdict = HandshakeStatus::unexpected_rank;
    if (verdict == HandshakeStatus::accepted && token) {
      Mac mac{};
      std::copy_n(reply.begin() + kHelloBytes, kMacBytes, mac.begin());
      if (theirs.nonce != challenge ||
          !same_mac(mac, handshake_mac(*token, "strata-accept", mine_bytes, theirs_bytes)))
        verdict = HandshakeStatus::authentication_failed;
    }
    const std::array<std::byte, 1> final_status{static_cast<std::byte>(verdict)};
    if (!write(asio::buffer(final_status))) return false;
    if (verdict != HandshakeStatus::accepted) refused(to_string(verdict));
    socket_.set_option(tcp::no_delay(true), ec);
    if (!ec) ec = choose_congestion_control(socket_, std::nullopt);
    if (!ec) socket_.native_non_blocking(true, ec);
    if (ec) {
      why = fmt::format("cannot set up the socket: {}", ec.message());
      return false;
    }
    return true;
  }

  asio::io_context io_{1};
  tcp::socket socket_{io_};
  ReadAhead ahead_;  // read from the socket, not yet received
};

}  // namespace strata::transport::tcp
