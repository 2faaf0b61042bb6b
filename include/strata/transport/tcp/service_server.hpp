// strata/transport/tcp/service_server.hpp — serving requests over TCP: the accepting side of
// the handshake, then request and reply frames, for a service above the transport (the
// parameter servers of ps/) that knows nothing of sockets.
//
// One thread runs everything: the service sees one request at a time, to its end, so it needs
// no lock. Per connection, the service's session says where each request's payload goes (in
// steps, so that a payload can be read straight into the storage its first bytes select) and
// then replies; payload it did not ask for is read and dropped before the reply goes out, so
// an error reply never leaves the connection out of step. Bytes that are not strata frames, a
// frame that is not a request, or a request whose payload stalls past the timeout close the
// connection: the service never sees them.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <strata/cluster/address.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/busy_poll.hpp>
#include <strata/transport/tcp/congestion.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/read_ahead.hpp>
#include <strata/transport/tcp/route.hpp>
#include <strata/transport/tcp/service_identity.hpp>
#include <strata/transport/tcp/service_session.hpp>

namespace strata::transport::tcp {

/// How a ServiceServer's `serve` ended.
enum class ServiceEnd : std::uint8_t {
  finished,  ///< a reply asked to close
  stopped,   ///< `stop()` was called
  idle,      ///< no client was connected for the idle timeout
};

/// Counters of a ServiceServer.
struct ServiceStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t refused = 0;  ///< connections refused in the handshake or dropped for garbage
};

/// Accepts clients on `address` and serves them until a reply closes, `stop()`, or no client
/// has been connected for `idle_timeout`. Thread safety: `stop` from any thread; the rest from
/// the serving one.
class ServiceServer {
 public:
  using tcp = asio::ip::tcp;

  /// Binds `address`. `max_payload` bounds what a request may announce; `request_timeout` how
  /// long a request's payload may take once its header has arrived.
  /// @throws ConfigurationError naming `who` when the address cannot be bound.
  ServiceServer(const cluster::Address& address, std::string who, ServiceIdentity identity,
                ServiceHandler& handler, std::uint32_t max_payload,
                std::chrono::milliseconds request_timeout)
      : who_(std::move(who)),
        identity_(std::move(identity)),
        handler_(handler),
        max_payload_(max_payload),
        request_timeout_(request_timeout) {
    random_bytes(std::as_writable_bytes(std::span(&incarnation_, 1)));
    bind(address);
  }
  ServiceServer(const ServiceServer&) = delete;
  ServiceServer& operator=(const ServiceServer&) = delete;

  std::uint16_t port() const noexcept {
    std::error_code ec;
    const auto endpoint = acceptor_.local_endpoint(ec);
    return ec ? 0 : endpoint.port();
  }

  const ServiceStats& stats() const noexcept { return stats_; }

  ServiceEnd serve(std::chrono::milliseconds idle_timeout) {
    idle_timeout_ = idle_timeout;
    accept();
    arm_idle_timer();
    // Polls without sleeping for a while after each event, as the collectives do (busy_poll.hpp):
    // a request's wake-up would otherwise cost more than serving it.
    auto busy_until = Clock::now() + kBusyPoll;
    while (!io_.stopped()) {
      if (io_.poll() > 0) {
        busy_until = Clock::now() + kBusyPoll;
      } else if (Clock::now() < busy_until) {
        ::sched_yield();
      } else {
        io_.run_one();
        busy_until = Clock::now() + kBusyPoll;
      }
    }
    return end_;
  }

  void stop() {
    asio::post(io_, [this] { close_all(ServiceEnd::stopped); });
  }

 private:
  struct Connection {
    explicit Connection(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::unique_ptr<ServiceSession> session;
    HelloBytes theirs_bytes{};
    Hello theirs;
    std::array<std::byte, kNonceBytes> challenge{};
    Mac mac{};
    std::array<std::byte, kVerdictBytes> verdict{};
    std::array<std::byte, 1> final_status{};
    ReadAhead inbox;  // read from the socket, not yet consumed
    FrameHeader request;
    std::uint64_t payload_left = 0;
    bool timed = false;    // the request's timeout is armed
    bool waiting = false;  // for a deferred reply
    std::vector<std::byte> scratch;
    FrameBytes reply_bytes{};
  };
  using ConnectionPtr = std::shared_ptr<Connection>;

  void bind(const cluster::Address& own) {
    std::error_code ec;
    const auto endpoints = resolve_endpoints<tcp>(own.host, own.port, ec);
    if (ec || endpoints.empty())
      throw ConfigurationError(-1, who_,
                               fmt::format("cannot resolve {}: {}", own.to_string(), ec.message()),
                               "give each task a host name or IP address of its own machine");
    const tcp::endpoint endpoint = endpoints.front();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec == asio::error::address_in_use)
      throw ConfigurationError(
          -1, who_, fmt::format("cannot listen on {}: the port is in use", own.to_string()),
          "stop the program holding it (a previous run?) or give this task "
          "another port");
    if (ec)
      throw ConfigurationError(
          -1, who_, fmt::format("cannot listen on {}: {}", own.to_string(), ec.message()),
          "check that the cluster spec gives this task an address of its "
          "own host");
  }

  // ---- connections and the handshake ---------------------------------------------------------

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (closing_ || ec == asio::error::operation_aborted) return;
      if (!ec) handshake(std::make_shared<Connection>(std::move(socket)));
      accept();
    });
  }

  void drop(const ConnectionPtr& connection) {
    std::error_code ignored;
    connection->timer.cancel();
    connection->socket.close(ignored);
    if (established_.erase(connection) != 0 && --connected_ == 0) arm_idle_timer();
  }

  void refuse(const ConnectionPtr& connection) {
    ++stats_.refused;
    drop(connection);
  }

  // A connection that fails its handshake is refused once.
  void abandon(const ConnectionPtr& connection) {
    if (pending_.erase(connection) != 0) refuse(connection);
  }

  void handshake(const ConnectionPtr& connection) {
    std::error_code ignored;
    connection->socket.set_option(tcp::no_delay(true), ignored);
    choose_congestion_control(connection->socket, std::nullopt);
    pending_.insert(connection);
    connection->timer.expires_after(kHandshakeTimeout);
    connection->timer.async_wait([this, connection](std::error_code ec) {
      if (!ec) abandon(connection);
    });
    asio::async_read(connection->socket, asio::buffer(connection->theirs_bytes),
                     [this, connection](std::error_code ec, std::size_t) {
                       if (ec) return abandon(connection);
                       on_hello(connection);
                     });
  }

  void on_hello(const ConnectionPtr& connection) {
    if (!decode(std::span<const std::byte, kHelloBytes>(connection->theirs_bytes),
                connection->theirs))
      return abandon(connection);
    const Hello& theirs = connection->theirs;
    if (theirs.version != kProtocolVersion || !identity_.token)
      return answer(connection, judge(theirs, identity_));
    if ((theirs.flags & Hello::kHasToken) == 0)
      return answer(connection, HandshakeStatus::token_required);
    // With a token, nothing is judged before the connector has proven it.
    random_bytes(connection->challenge);
    connection->verdict[0] = static_cast<std::byte>(HandshakeStatus::challenge);
    std::copy(connection->challenge.begin(), connection->challenge.end(),
              connection->verdict.begin() + 1);
    asio::async_write(
        connection->socket, asio::buffer(connection->verdict.data(), 1 + kNonceBytes),
        [this, connection](std::error_code ec, std::size_t) {
          if (ec) return abandon(connection);
          asio::async_read(connection->socket, asio::buffer(connection->mac),
                           [this, connection](std::error_code read_ec, std::size_t) {
                             if (read_ec) return abandon(connection);
                             const bool authentic = same_mac(
                                 connection->mac,
                                 handshake_mac(*identity_.token, "strata-connect",
                                               connection->theirs_bytes, connection->challenge));
                             answer(connection, authentic ? judge(connection->theirs, identity_)
                                                          : HandshakeStatus::authentication_failed);
                           });
        });
  }

  void answer(const ConnectionPtr& connection, HandshakeStatus status) {
    const std::size_t length =
        encode_verdict(status, identity_, incarnation_, connection->theirs,
                       connection->theirs_bytes, connection->challenge, connection->verdict);
    asio::async_write(connection->socket, asio::buffer(connection->verdict.data(), length),
                      [this, connection, status](std::error_code ec, std::size_t) {
                        if (ec || status != HandshakeStatus::accepted) return abandon(connection);
                        asio::async_read(
                            connection->socket, asio::buffer(connection->final_status),
                            [this, connection](std::error_code read_ec, std::size_t) {
                              if (read_ec || connection->final_status[0] !=
                                                 static_cast<std::byte>(HandshakeStatus::accepted))
                                return abandon(connection);
                              established(connection);
                            });
                      });
  }

  void established(const ConnectionPtr& connection) {
    if (pending_.erase(connection) == 0) return;  // its handshake timed out meanwhile
    connection->timer.cancel();
    // Replies are written at once where they fit (send); a socket that cannot stop blocking
    // could stall the one serving thread.
    std::error_code ec;
    connection->socket.non_blocking(true, ec);
    if (ec) return refuse(connection);
    const std::weak_ptr<Connection> weak = connection;
    connection->session =
        handler_.open(connection->theirs.rank, [this, weak](const SendReply& reply) {
          const auto alive = weak.lock();
          if (!alive || !alive->waiting || closing_) return;
          alive->waiting = false;
          send(alive, reply);
        });
    established_.insert(connection);
    if (connected_++ == 0) idle_timer_.cancel();
    read_header(connection);
  }

  // ---- requests ------------------------------------------------------------------------------

  // The next request: already in the inbox when the client sent it before this reply came (it
  // runs after the events already waiting, so that no connection starves the others), or read.
  void next_request(const ConnectionPtr& connection) {
    if (connection->inbox.buffered() < kFrameHeaderBytes) return read_header(connection);
    asio::post(io_, [this, connection] {
      if (!closing_ && connection->socket.is_open()) on_header(connection);
    });
  }

  // Reads into the inbox until a header is there: a small request arrives whole in one recv(2).
  void read_header(const ConnectionPtr& connection) {
    const std::span<std::byte> space = connection->inbox.space();
    connection->socket.async_read_some(asio::buffer(space.data(), space.size()),
                                       [this, connection](std::error_code ec, std::size_t n) {
                                         if (ec) return drop(connection);
                                         connection->inbox.filled(n);
                                         if (connection->inbox.buffered() < kFrameHeaderBytes)
                                           return read_header(connection);
                                         on_header(connection);
                                       });
  }

  void on_header(const ConnectionPtr& connection) {
    Connection& c = *connection;
    FrameHeader& request = c.request;
    const std::error_code ec =
        decode(c.inbox.bytes().first<kFrameHeaderBytes>(), request, max_payload_);
    if (ec || request.type != FrameType::request) return refuse(connection);
    c.inbox.skip(kFrameHeaderBytes);
    c.payload_left = request.payload_bytes;
    c.timed = false;
    advance(connection, c.session->on_request(request));
  }

  // A request that has to wait for its payload must have it within the timeout. Requests that
  // arrive whole never arm it: a timer costs a system call.
  void arm_request_timeout(const ConnectionPtr& connection) {
    if (connection->timed) return;
    connection->timed = true;
    connection->timer.expires_after(request_timeout_);
    connection->timer.async_wait([this, connection](std::error_code timer_ec) {
      if (!timer_ec) refuse(connection);
    });
  }

  void advance(const ConnectionPtr& connection, SessionStep step) {
    if (auto* reply = std::get_if<SendReply>(&step)) return drop_rest(connection, *reply);
    if (const auto* wait = std::get_if<WaitForReply>(&step)) {
      // A session that waits before it read its request has a bug: the rest would be taken
      // for the next request.
      if (connection->payload_left != 0) return refuse(connection);
      connection->timer.cancel();  // the client's deadline bounds the wait, or the hold does
      connection->waiting = true;
      if (wait->hold > std::chrono::milliseconds::zero()) {
        connection->timer.expires_after(wait->hold);
        connection->timer.async_wait([this, connection](std::error_code ec) {
          if (ec || !connection->waiting || closing_) return;  // replied meanwhile
          SessionStep next = connection->session->on_hold_expired();
          if (std::holds_alternative<WaitForReply>(next)) return;  // on, without a hold
          connection->waiting = false;
          advance(connection, std::move(next));
        });
      }
      // A client waits for its reply in silence: its connection turning readable now means it
      // closed (the process died), and the session must end with it.
      connection->socket.async_wait(tcp::socket::wait_read, [this, connection](std::error_code ec) {
        if (!ec && connection->waiting && !closing_) drop(connection);
      });
      return;
    }
    auto& read = std::get<ReadPayload>(step);
    std::uint64_t total = 0;
    for (const auto& part : read.into)
      total += part.size();
    // A session that asks for more than the request carries would wait forever: it has a bug.
    if (total > connection->payload_left) return refuse(connection);
    connection->payload_left -= total;
    stats_.bytes_in += total;
    // What the inbox holds first, then the socket, straight into the session's buffers.
    std::vector<asio::mutable_buffer> rest;
    for (const auto& part : read.into) {
      const std::size_t taken = connection->inbox.take(part);
      if (taken < part.size())
        rest.push_back(asio::buffer(part.data() + taken, part.size() - taken));
    }
    if (rest.empty()) return advance(connection, connection->session->on_payload());
    arm_request_timeout(connection);
    asio::async_read(connection->socket, rest, [this, connection](std::error_code ec, std::size_t) {
      if (ec) return drop(connection);
      advance(connection, connection->session->on_payload());
    });
  }

  // The payload the session left unread is dropped, then the reply goes out.
  void drop_rest(const ConnectionPtr& connection, SendReply reply) {
    const auto buffered = static_cast<std::size_t>(
        std::min<std::uint64_t>(connection->payload_left, connection->inbox.buffered()));
    connection->inbox.skip(buffered);
    connection->payload_left -= buffered;
    stats_.bytes_in += buffered;
    if (connection->payload_left == 0) return send(connection, reply);
    arm_request_timeout(connection);
    connection->scratch.resize(
        static_cast<std::size_t>(std::min<std::uint64_t>(connection->payload_left, 1 << 16)));
    connection->payload_left -= connection->scratch.size();
    stats_.bytes_in += connection->scratch.size();
    asio::async_read(connection->socket, asio::buffer(connection->scratch),
                     [this, connection, reply](std::error_code ec, std::size_t) {
                       if (ec) return drop(connection);
                       drop_rest(connection, reply);
                     });
  }

  void send(const ConnectionPtr& connection, const SendReply& reply) {
    connection->timer.cancel();
    FrameHeader header;
    header.type = FrameType::reply;
    header.kind = connection->request.kind;
    header.sequence = connection->request.sequence;
    header.root = reply.status;
    header.count = reply.count;
    header.element_type = reply.type;
    header.flags = reply.flags;
    header.payload_bytes = static_cast<std::uint32_t>(reply.payload.size());
    connection->reply_bytes = encode(header);
    ++stats_.requests;
    stats_.bytes_out += reply.payload.size();
    std::array<asio::const_buffer, 2> buffers{
        asio::buffer(connection->reply_bytes),
        asio::buffer(reply.payload.data(), reply.payload.size())};
    // Most replies fit in the socket's buffer: written at once, they need no trip through the
    // event loop (the socket is non-blocking: what does not fit goes out asynchronously).
    std::error_code ec;
    std::size_t sent = connection->socket.send(buffers, 0, ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again)
      return drop(connection);
    if (sent == buffers[0].size() + buffers[1].size()) return replied(connection, reply.then_close);
    for (auto& buffer : buffers) {
      const std::size_t skipped = std::min(sent, buffer.size());
      buffer += skipped;
      sent -= skipped;
    }
    asio::async_write(
        connection->socket, buffers,
        [this, connection, close = reply.then_close](std::error_code write_ec, std::size_t) {
          if (write_ec) return drop(connection);
          replied(connection, close);
        });
  }

  void replied(const ConnectionPtr& connection, bool then_close) {
    if (then_close) return close_all(ServiceEnd::finished);
    next_request(connection);
  }

  // ---- ending --------------------------------------------------------------------------------

  void arm_idle_timer() {
    if (closing_) return;
    idle_timer_.expires_after(idle_timeout_);
    idle_timer_.async_wait([this](std::error_code ec) {
      if (!ec && connected_ == 0) close_all(ServiceEnd::idle);
    });
  }

  void close_all(ServiceEnd end) {
    if (closing_) return;
    closing_ = true;
    end_ = end;
    std::error_code ignored;
    acceptor_.close(ignored);
    idle_timer_.cancel();
    for (const auto* set : {&pending_, &established_})
      for (const auto& connection : *set) {
        connection->timer.cancel();
        connection->socket.close(ignored);
      }
    pending_.clear();
    established_.clear();
  }

  std::string who_;
  ServiceIdentity identity_;
  ServiceHandler& handler_;
  std::uint32_t max_payload_;
  std::chrono::milliseconds request_timeout_;
  std::chrono::milliseconds idle_timeout_{};
  std::uint64_t incarnation_ = 0;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer idle_timer_{io_};
  std::set<ConnectionPtr> pending_;      // in the handshake
  std::set<ConnectionPtr> established_;  // serving
  int connected_ = 0;
  bool closing_ = false;
  ServiceEnd end_ = ServiceEnd::stopped;
  ServiceStats stats_;
};

}  // namespace strata::transport::tcp
