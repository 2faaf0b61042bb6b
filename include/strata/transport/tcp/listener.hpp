// strata/transport/tcp/listener.hpp — the accepting side of forming a mesh: this rank's
// listening socket and the acceptor's half of the handshake (handshake.hpp).
//
// Peers of a higher rank connect here. The listening socket binds the address given for this
// rank (never all interfaces), or adopts one already bound to it, and is closed once the mesh
// is complete, so nothing can join a running group. Each accepted connection gets a bounded
// time for its handshake, so a silent one cannot hold resources until the group's deadline;
// what is turned away (garbage, another cluster, a wrong token) is remembered for the timeout
// message.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/pending_mesh.hpp>

namespace strata::transport::tcp {

/// Accepts the connections of the peers of higher ranks into a PendingMesh.
class Listener {
 public:
  using tcp = asio::ip::tcp;

  explicit Listener(PendingMesh& pending) : pending_(pending), acceptor_(pending.io()) {}
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  /// Binds (or adopts) this rank's address and starts accepting.
  /// @throws ConfigurationError for a port in use or an address that is not this host's.
  void listen() {
    const MeshConfig& config = pending_.config();
    if (config.listen_fd >= 0)
      adopt(config.listen_fd);
    else
      bind();
    if (config.rank < pending_.size() - 1) accept();  // only peers of a higher rank connect here
  }

  /// Closes the listening socket: nothing more is accepted.
  void close() {
    std::error_code ignored;
    acceptor_.close(ignored);
  }

  /// Drops the handshakes still in flight; their handlers release the sockets.
  void abandon_handshakes() {
    for (auto& weak : incoming_)
      if (auto in = weak.lock()) in->abandon();
  }

  /// What was turned away (at most a few), and how many more.
  const std::vector<std::string>& rejections() const noexcept { return rejections_; }
  int more_rejections() const noexcept { return more_rejections_; }

 private:
  struct Incoming {
    Incoming(tcp::socket s, asio::io_context& io) : socket(std::move(s)), timer(io) {}
    void abandon() {
      std::error_code ignored;
      timer.cancel();
      socket.close(ignored);
    }
    tcp::socket socket;
    asio::steady_timer timer;
    std::string remote;
    HelloBytes theirs_bytes{};
    Hello theirs;
    std::array<std::byte, kNonceBytes> challenge{};
    std::array<std::byte, 1 + kHelloBytes + kMacBytes> reply{};
    Mac mac{};
    std::array<std::byte, 1> final_status{};
  };

  int rank() const noexcept { return pending_.config().rank; }

  void adopt(int listen_fd) {
    const cluster::Address& own = pending_.address(rank());
    std::error_code ec;
    tcp::endpoint local;
    acceptor_.assign(tcp::v4(), listen_fd, ec);
    if (!ec) local = acceptor_.local_endpoint(ec);
    if (!ec && local.address().is_v6()) {
      // assign() needs the right protocol: re-adopt as IPv6.
      const int fd = acceptor_.release(ec);
      acceptor_.assign(tcp::v6(), fd, ec);
    }
    if (ec)
      throw ConfigurationError(rank(), "rendezvous",
                               fmt::format("cannot adopt the listening socket for {}: {}",
                                           own.to_string(), ec.message()),
                               "pass a bound, listening TCP socket or none");
  }

  void bind() {
    const cluster::Address& own = pending_.address(rank());
    std::error_code ec;
    tcp::resolver resolver(pending_.io());
    auto endpoints =
        resolver.resolve(own.host, std::to_string(own.port), tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty())
      throw ConfigurationError(
          rank(), "rendezvous",
          fmt::format("cannot resolve this rank's address {}: {}", own.to_string(), ec.message()),
          "give each task a host name or IP address of its own machine");
    const tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (ec == asio::error::address_in_use)
      throw ConfigurationError(
          rank(), "rendezvous",
          fmt::format("port {} of {} is already in use", own.port, own.to_string()),
          "stop the program holding it (a previous run?) or give this task another port");
    // asio's system category maps EADDRNOTAVAIL to no std::errc condition: compare the value.
    if (ec == std::error_code(EADDRNOTAVAIL, asio::error::get_system_category()))
      throw ConfigurationError(
          rank(), "rendezvous",
          fmt::format("{} is not an address of this machine", own.to_string()),
          "check that the cluster spec gives this task its own host's address");
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      throw ConfigurationError(
          rank(), "rendezvous",
          fmt::format("cannot listen on {}: {}", own.to_string(), ec.message()),
          "check the address and port given for this task");
  }

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) handshake_incoming(std::move(socket));
      accept();
    });
  }

  // What was turned away, for the timeout message.
  void reject(const std::string& remote, std::string_view why) {
    if (rejections_.size() < 8)
      rejections_.push_back(fmt::format("{}: {}", remote, why));
    else
      ++more_rejections_;
  }

  void handshake_incoming(tcp::socket socket) {
    auto in = std::make_shared<Incoming>(std::move(socket), pending_.io());
    incoming_.push_back(in);
    std::error_code ec;
    const auto remote = in->socket.remote_endpoint(ec);
    in->remote = ec ? std::string("unknown peer")
                    : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    in->timer.expires_at(
        std::min(pending_.deadline().time_point(), Clock::now() + kHandshakeTimeout));
    in->timer.async_wait([in](std::error_code timer_ec) {
      if (!timer_ec) in->abandon();
    });
    asio::async_read(in->socket, asio::buffer(in->theirs_bytes),
                     [this, in](std::error_code read_ec, std::size_t) {
                       if (read_ec) {
                         if (read_ec != asio::error::operation_aborted)
                           reject(in->remote, "closed or timed out during the handshake");
                         in->abandon();
                         return;
                       }
                       on_hello(in);
                     });
  }

  // The connector's Hello arrived: challenge it when there is a token, else judge it.
  void on_hello(const std::shared_ptr<Incoming>& in) {
    if (!decode(std::span<const std::byte, kHelloBytes>(in->theirs_bytes), in->theirs)) {
      reject(in->remote, "sent bytes that are not a strata handshake");
      in->abandon();
      return;
    }
    const HandshakeStatus first = pending_.screen(in->theirs);
    if (first != HandshakeStatus::challenge) return answer(in, first);
    random_bytes(in->challenge);
    in->reply[0] = static_cast<std::byte>(first);
    std::copy(in->challenge.begin(), in->challenge.end(), in->reply.begin() + 1);
    asio::async_write(in->socket, asio::buffer(in->reply.data(), 1 + kNonceBytes),
                      [this, in](std::error_code ec, std::size_t) {
                        if (ec) return in->abandon();
                        asio::async_read(in->socket, asio::buffer(in->mac),
                                         [this, in](std::error_code read_ec, std::size_t) {
                                           if (read_ec) {
                                             if (read_ec != asio::error::operation_aborted)
                                               reject(in->remote,
                                                      "closed or timed out before proving the "
                                                      "cluster token");
                                             return in->abandon();
                                           }
                                           on_mac(in);
                                         });
                      });
  }

  // The connector's answer to the challenge: only a connector that proved the token is judged.
  void on_mac(const std::shared_ptr<Incoming>& in) {
    const bool authentic = same_mac(
        in->mac,
        handshake_mac(*pending_.config().token, "strata-connect", in->theirs_bytes, in->challenge));
    answer(in, authentic ? pending_.judge(in->theirs) : HandshakeStatus::authentication_failed);
  }

  // The verdict: accepted with our Hello (and MAC), or the reason alone, then the connection
  // closes.
  void answer(const std::shared_ptr<Incoming>& in, HandshakeStatus status) {
    const MeshConfig& config = pending_.config();
    const Hello& theirs = in->theirs;
    std::size_t length = 1;
    in->reply[0] = static_cast<std::byte>(status);
    if (status == HandshakeStatus::accepted) {
      const auto known = pending_.peer_incarnation(theirs.rank);
      if (known != 0 && known != theirs.incarnation)
        pending_.forget_peer(theirs.rank);  // restarted
      Hello mine = pending_.own_hello(theirs.connection);
      if (config.token) mine.nonce = in->challenge;
      const HelloBytes mine_bytes = encode(mine);
      std::copy(mine_bytes.begin(), mine_bytes.end(), in->reply.begin() + 1);
      length += kHelloBytes;
      if (config.token) {
        const Mac mac = handshake_mac(*config.token, "strata-accept", in->theirs_bytes, mine_bytes);
        std::copy(mac.begin(), mac.end(), in->reply.begin() + 1 + kHelloBytes);
        length += kMacBytes;
      }
    }
    asio::async_write(in->socket, asio::buffer(in->reply.data(), length),
                      [this, in, status](std::error_code ec, std::size_t) {
                        if (ec || status != HandshakeStatus::accepted) {
                          if (!ec)
                            reject(in->remote, fmt::format("claimed rank {}: {}", in->theirs.rank,
                                                           to_string(status)));
                          return in->abandon();
                        }
                        read_final_status(in);
                      });
  }

  // The connector's last word on our Hello: accepted takes the connection.
  void read_final_status(const std::shared_ptr<Incoming>& in) {
    asio::async_read(in->socket, asio::buffer(in->final_status),
                     [this, in](std::error_code ec, std::size_t) {
                       if (ec) return in->abandon();
                       const auto status = static_cast<HandshakeStatus>(in->final_status[0]);
                       if (status != HandshakeStatus::accepted) {
                         reject(in->remote, fmt::format("rank {} refused this rank: {}",
                                                        in->theirs.rank, to_string(status)));
                         return in->abandon();
                       }
                       in->timer.cancel();
                       pending_.established(in->theirs.rank, in->theirs.connection,
                                            std::move(in->socket), in->theirs.incarnation);
                     });
  }

  PendingMesh& pending_;
  tcp::acceptor acceptor_;
  std::vector<std::weak_ptr<Incoming>> incoming_;
  std::vector<std::string> rejections_;
  int more_rejections_ = 0;
};

}  // namespace strata::transport::tcp
