// strata/transport/tcp/connector.hpp — the connecting side of forming a mesh: connecting to
// the peers of lower ranks, with retries, and the connector's half of the handshake
// (handshake.hpp).
//
// Ranks start in any order: a connect that fails, or a handshake that breaks off, is retried
// with exponential backoff and jitter until the deadline. A peer that refuses this rank for a
// reason that retrying cannot fix (other cluster, world size, tunables, cluster token) fails
// the forming with a ConfigurationError naming the peer and the reason.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/pending_mesh.hpp>

namespace strata::transport::tcp {

/// Connects this rank to the peers of lower ranks for a PendingMesh.
class Connector {
 public:
  using tcp = asio::ip::tcp;

  explicit Connector(PendingMesh& pending) : pending_(pending) {}
  Connector(const Connector&) = delete;
  Connector& operator=(const Connector&) = delete;

  /// Starts connecting every connection to `peer`.
  void connect_to(int peer) {
    for (int index = 0; index < pending_.per_peer(); ++index) {
      auto attempt = std::make_shared<Attempt>(pending_.io(), peer, index);
      attempts_.push_back(attempt);
      connect(attempt);
    }
  }

  /// Drops the attempts still in flight; their handlers release the sockets.
  void abandon() {
    for (auto& weak : attempts_)
      if (auto attempt = weak.lock()) attempt->abandon();
  }

  /// Why the last connect to each peer failed, for the timeout message.
  const std::map<int, std::string>& last_errors() const noexcept { return last_connect_error_; }

 private:
  struct Attempt {
    Attempt(asio::io_context& io, int p, int i) : socket(io), timer(io), peer(p), index(i) {}
    void abandon() {
      std::error_code ignored;
      abandoned = true;
      timer.cancel();
      socket.close(ignored);
    }
    tcp::socket socket;
    asio::steady_timer timer;
    int peer;
    int index;
    int tries = 0;
    bool abandoned = false;
    Hello mine;
    HelloBytes mine_bytes{};
    std::array<std::byte, 1> status{};
    bool challenged = false;
    std::array<std::byte, kNonceBytes> challenge{};
    Mac mac{};
    std::array<std::byte, kHelloBytes + kMacBytes> reply{};  // the acceptor's Hello and MAC
    std::array<std::byte, 1> final_status{};
    std::uint64_t incarnation_seen = 0;
  };

  const MeshConfig& config() const noexcept { return pending_.config(); }

  void connect(const std::shared_ptr<Attempt>& attempt) {
    const cluster::Address& target = pending_.address(attempt->peer);
    std::error_code ec;
    tcp::resolver resolver(pending_.io());
    auto endpoints = resolver.resolve(target.host, std::to_string(target.port),
                                      tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) {
      retry(attempt, fmt::format("cannot resolve {}: {}", target.to_string(), ec.message()));
      return;
    }
    attempt->socket = tcp::socket(pending_.io());
    asio::async_connect(attempt->socket, endpoints,
                        [this, attempt](std::error_code connect_ec, const tcp::endpoint&) {
                          if (attempt->abandoned) return;
                          if (connect_ec) {
                            retry(attempt, connect_ec.message());
                            return;
                          }
                          send_hello(attempt);
                        });
  }

  void retry(const std::shared_ptr<Attempt>& attempt, std::string why) {
    last_connect_error_[attempt->peer] = std::move(why);
    std::error_code ignored;
    attempt->socket.close(ignored);
    // 10 ms doubling to 1 s, with ±25% jitter so that restarted groups do not retry in step.
    const int shift = std::min(attempt->tries++, 7);
    const auto base = std::chrono::milliseconds(10) * (1 << shift);
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::min<std::chrono::milliseconds>(base, std::chrono::seconds(1)) * jitter(random_));
    attempt->timer.expires_after(wait);
    attempt->timer.async_wait([this, attempt](std::error_code ec) {
      if (ec || attempt->abandoned) return;
      connect(attempt);
    });
  }

  void send_hello(const std::shared_ptr<Attempt>& attempt) {
    attempt->mine = pending_.own_hello(attempt->index);
    attempt->mine_bytes = encode(attempt->mine);
    attempt->challenged = false;
    attempt->timer.expires_at(
        std::min(pending_.deadline().time_point(), Clock::now() + kHandshakeTimeout));
    attempt->timer.async_wait([attempt](std::error_code ec) {
      if (!ec) {
        std::error_code ignored;
        attempt->socket.close(ignored);  // the pending read fails and the attempt retries
      }
    });
    asio::async_write(attempt->socket, asio::buffer(attempt->mine_bytes),
                      [this, attempt](std::error_code ec, std::size_t) {
                        if (attempt->abandoned) return;
                        if (ec) return retry(attempt, ec.message());
                        read_status(attempt);
                      });
  }

  [[noreturn]] void refused(int peer, std::string_view why) {
    throw ConfigurationError(config().rank, "rendezvous",
                             fmt::format("rank {} ({}) and this rank cannot form a group: {}", peer,
                                         pending_.address(peer).to_string(), why),
                             "start every rank with the same cluster spec, strata version, "
                             "TCP options and STRATA_CLUSTER_TOKEN");
  }

  // Reads `buffer` whole, then goes on with `next`; a connection that closes is retried.
  template <typename Buffer, typename Next>
  void read(const std::shared_ptr<Attempt>& attempt, Buffer buffer, Next next) {
    asio::async_read(attempt->socket, buffer,
                     [this, attempt, next](std::error_code ec, std::size_t) {
                       if (attempt->abandoned) return;
                       if (ec) return retry(attempt, "the connection closed during the handshake");
                       next();
                     });
  }

  void read_status(const std::shared_ptr<Attempt>& attempt) {
    read(attempt, asio::buffer(attempt->status), [this, attempt] { on_status(attempt); });
  }

  // The acceptor's word on our Hello: a challenge, accepted (its Hello follows), or why not.
  void on_status(const std::shared_ptr<Attempt>& attempt) {
    if (!is_handshake_status(attempt->status[0]))
      return retry(attempt,
                   "the peer answered with bytes that are not a strata handshake of protocol "
                   "version " +
                       std::to_string(kProtocolVersion));
    const auto status = static_cast<HandshakeStatus>(attempt->status[0]);
    const bool token = config().token.has_value();
    try {
      switch (status) {
        case HandshakeStatus::challenge:
          if (!token || attempt->challenged)
            refused(attempt->peer, "it asked for a proof of a cluster token out of turn");
          attempt->challenged = true;
          return read(attempt, asio::buffer(attempt->challenge),
                      [this, attempt] { answer_challenge(attempt); });
        case HandshakeStatus::accepted:
          // An acceptor without our token would have said so: one that skips the challenge is
          // not a rank of this cluster.
          if (token && !attempt->challenged)
            refused(attempt->peer, "it accepted this rank without checking the cluster token");
          return read(attempt,
                      asio::buffer(attempt->reply.data(), kHelloBytes + (token ? kMacBytes : 0)),
                      [this, attempt] { on_acceptor_hello(attempt); });
        case HandshakeStatus::stale_incarnation:
          return retry(attempt, std::string(to_string(status)));
        default:
          refused(attempt->peer, to_string(status));
      }
    } catch (...) {
      pending_.fail(std::current_exception());
    }
  }

  void answer_challenge(const std::shared_ptr<Attempt>& attempt) {
    attempt->mac =
        handshake_mac(*config().token, "strata-connect", attempt->mine_bytes, attempt->challenge);
    asio::async_write(attempt->socket, asio::buffer(attempt->mac),
                      [this, attempt](std::error_code ec, std::size_t) {
                        if (attempt->abandoned) return;
                        if (ec) return retry(attempt, ec.message());
                        read_status(attempt);
                      });
  }

  // The acceptor must be who the cluster spec says, in the same cluster, with our token.
  HandshakeStatus judge_acceptor(const std::shared_ptr<Attempt>& attempt, const Hello& theirs,
                                 const HelloBytes& theirs_bytes) const {
    const MeshConfig& config = this->config();
    if (theirs.version != kProtocolVersion) return HandshakeStatus::bad_version;
    if (theirs.cluster != config.cluster) return HandshakeStatus::other_cluster;
    if (theirs.world_size != pending_.size()) return HandshakeStatus::world_size_differs;
    if (theirs.rank != attempt->peer) return HandshakeStatus::unexpected_rank;
    if (theirs.tunables != config.tunables) return HandshakeStatus::tunables_differ;
    if (config.token) {
      Mac mac{};
      std::copy_n(attempt->reply.begin() + kHelloBytes, kMacBytes, mac.begin());
      if (theirs.nonce != attempt->challenge ||
          !same_mac(mac, handshake_mac(*config.token, "strata-accept", attempt->mine_bytes,
                                       theirs_bytes)))
        return HandshakeStatus::authentication_failed;
    }
    return HandshakeStatus::accepted;
  }

  // The acceptor's Hello (and MAC) arrived: check them and tell the acceptor the verdict.
  void on_acceptor_hello(const std::shared_ptr<Attempt>& attempt) {
    HelloBytes theirs_bytes{};
    std::copy_n(attempt->reply.begin(), kHelloBytes, theirs_bytes.begin());
    Hello theirs;
    if (!decode(std::span<const std::byte, kHelloBytes>(theirs_bytes), theirs))
      return retry(attempt, "the peer answered with bytes that are not a strata handshake");
    const HandshakeStatus verdict = judge_acceptor(attempt, theirs, theirs_bytes);
    attempt->final_status[0] = static_cast<std::byte>(verdict);
    attempt->incarnation_seen = theirs.incarnation;
    std::string why(to_string(verdict));
    if (verdict == HandshakeStatus::unexpected_rank)
      why = fmt::format("it answered as rank {}", theirs.rank);
    asio::async_write(attempt->socket, asio::buffer(attempt->final_status),
                      [this, attempt, verdict, why](std::error_code ec, std::size_t) {
                        if (attempt->abandoned) return;
                        if (verdict != HandshakeStatus::accepted) {
                          try {
                            refused(attempt->peer, why);
                          } catch (...) {
                            pending_.fail(std::current_exception());
                          }
                          return;
                        }
                        if (ec) return retry(attempt, ec.message());
                        attempt->timer.cancel();
                        attempt->abandoned = true;  // done: the socket moves to the mesh
                        pending_.established(attempt->peer, attempt->index,
                                             std::move(attempt->socket), attempt->incarnation_seen);
                      });
  }

  PendingMesh& pending_;
  std::vector<std::weak_ptr<Attempt>> attempts_;
  std::map<int, std::string> last_connect_error_;
  std::minstd_rand random_{std::random_device{}()};
};

}  // namespace strata::transport::tcp
