// strata/transport/tcp/rendezvous.hpp — forming the full mesh of TCP connections of a group.
//
// Every pair of ranks is joined by 1 + K connections: connection 0 carries control messages
// (abort reasons, timeout notices, goodbyes) and is always at a message boundary; connections
// 1..K carry data. The higher rank connects, the lower one accepts. Ranks start in any order:
// connects are retried with exponential backoff and jitter until the deadline; each connection
// passes the handshake of handshake.hpp. The listening socket binds the address given for this
// rank (never all interfaces) and is closed once the mesh is complete, so nothing can join a
// running group.
//
// A rank holding all its connections sends kMeshReady to every peer and returns once every peer
// has sent its own: no rank starts collectives while another is still forming its mesh. So a peer
// whose connections close before its kMeshReady died while joining (a restarted worker's first
// incarnation): it is forgotten and its next incarnation awaited. A peer that finished joining,
// ran ahead and failed is never mistaken for one.
//
// Errors: the port in use or an address that is not this host's → ConfigurationError naming
// it; a peer that refuses this rank for a reason that retrying cannot fix (other cluster,
// world size, tunables, cluster token) → ConfigurationError naming the peer and the reason;
// the deadline → TimeoutError listing the ranks that did not join, and what was rejected
// meanwhile (garbage, wrong token, ...).
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
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

namespace strata::transport::tcp {

/// What a rank needs to join its group's mesh.
struct MeshConfig {
  int rank = 0;
  std::vector<cluster::Address> addresses;  ///< every rank's listening address, in rank order
  std::uint64_t cluster = 0;                ///< cluster fingerprint; equal on every rank
  std::uint64_t tunables = 0;               ///< hash of the tunables ranks must agree on
  int data_connections = 1;                 ///< K
  std::optional<std::string> token;         ///< cluster token; the MACs are checked when set
  int socket_buffer_bytes = 0;              ///< SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel's
  bool no_delay = true;                     ///< TCP_NODELAY
  /// TCP_CONGESTION of every connection; unset: "reno" within one host, the kernel's default
  /// between hosts (see TcpOptions::congestion_control).
  std::optional<std::string> congestion_control;
  /// A listening socket already bound to addresses[rank] (adopted and closed by the mesh), or
  /// -1 to bind one.
  int listen_fd = -1;
};

/// The connections of one rank to every other rank of its group.
class Mesh {
 public:
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(peers_.size()); }
  int data_connections() const noexcept { return data_connections_; }
  /// Native handle of connection `index` (0 control, 1..K data) to `peer`.
  int fd(int peer, int index) const noexcept {
    return const_cast<asio::ip::tcp::socket&>(
               peers_[static_cast<std::size_t>(peer)][static_cast<std::size_t>(index)])
        .native_handle();
  }
  /// Ranks of the group on this rank's host, this one included: those whose connections run
  /// over loopback or between two addresses of this host.
  int ranks_on_this_host() const noexcept { return ranks_on_this_host_; }
  /// Shuts every connection down in both directions: peers blocked on this rank wake at once.
  void shutdown_all() noexcept {
    for (auto& peer : peers_)
      for (auto& socket : peer) {
        std::error_code ignored;
        socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
      }
  }

 private:
  friend class MeshBuilder;
  Mesh(int rank, int size, int data_connections)
      : rank_(rank), data_connections_(data_connections) {
    peers_.resize(static_cast<std::size_t>(size));
  }

  asio::io_context io_;  // declared first: the sockets below are destroyed before it
  int rank_;
  int data_connections_;
  int ranks_on_this_host_ = 1;
  std::vector<std::vector<asio::ip::tcp::socket>> peers_;
};

/// Forms the mesh (see the file comment). Blocks until every connection is up or `deadline`.
inline std::unique_ptr<Mesh> form_mesh(const MeshConfig& config, Deadline deadline);

// ---- implementation ---------------------------------------------------------------------------

class MeshBuilder {
 public:
  MeshBuilder(const MeshConfig& config, Deadline deadline)
      : config_(config),
        deadline_(deadline),
        size_(static_cast<int>(config.addresses.size())),
        per_peer_(1 + config.data_connections),
        mesh_(new Mesh(config.rank, size_, config.data_connections)),
        acceptor_(mesh_->io_) {
    std::array<std::byte, 8> incarnation{};
    random_bytes(incarnation);
    incarnation_ = detail::load_le<std::uint64_t>(incarnation.data());
    slots_.resize(static_cast<std::size_t>(size_ * per_peer_));
    peer_incarnation_.assign(static_cast<std::size_t>(size_), 0);
    readiness_.resize(static_cast<std::size_t>(size_));
    missing_ = (size_ - 1) * per_peer_;
  }

  std::unique_ptr<Mesh> build() {
    // Every rank binds its own address, also one that no peer connects to (the last rank, a
    // group of one): a foreign address or a port in use is then this rank's configuration
    // error, not a timeout blamed on a peer, and a socket handed in is closed below with the
    // rest instead of listening on for the life of the process.
    listen();
    if (missing_ == 0) {
      std::error_code ignored;
      acceptor_.close(ignored);
      return std::move(mesh_);
    }
    for (int peer = 0; peer < config_.rank; ++peer)
      connect_to(peer);
    if (!complete() && !failure_) mesh_->io_.run_until(deadline_.time_point());
    // Abandon what is still in flight and let its handlers run to release their sockets.
    std::error_code ignored;
    acceptor_.close(ignored);
    for (auto& weak : attempts_)
      if (auto attempt = weak.lock()) attempt->abandon();
    for (auto& weak : incoming_)
      if (auto in = weak.lock()) in->abandon();
    mesh_->io_.restart();
    mesh_->io_.poll();
    if (failure_) std::rethrow_exception(failure_);
    if (!complete()) throw timeout_error();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      auto& sockets = mesh_->peers_[static_cast<std::size_t>(peer)];
      if (same_host(*slots_[slot(peer, 0)])) ++mesh_->ranks_on_this_host_;
      for (int index = 0; index < per_peer_; ++index) {
        auto& socket = *slots_[slot(peer, index)];
        socket.non_blocking(true);
        sockets.push_back(std::move(socket));
      }
    }
    return std::move(mesh_);
  }

 private:
  using tcp = asio::ip::tcp;

  // The kMeshReady exchange with one peer, over its current control connection.
  struct Readiness {
    bool sent = false;      // our kMeshReady is written
    bool writing = false;   // ... or on its way
    bool received = false;  // theirs arrived
    bool reading = false;
    std::uint64_t generation = 0;  // bumped when the peer is forgotten: stale handlers ignore
  };

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
    std::array<std::byte, kHelloBytes + 1 + kMacBytes> reply{};
    HelloBytes theirs_bytes{};
    Mac mac{};
    std::array<std::byte, 1> status{};
    std::uint64_t incarnation_seen = 0;
    bool authentic = true;
  };

  std::size_t slot(int peer, int index) const noexcept {
    return static_cast<std::size_t>(peer * per_peer_ + index);
  }

  Hello own_hello(int index) const {
    Hello hello;
    hello.connection = static_cast<std::uint16_t>(index);
    hello.rank = config_.rank;
    hello.world_size = size_;
    hello.flags = config_.token ? Hello::kHasToken : 0;
    hello.cluster = config_.cluster;
    hello.tunables = config_.tunables;
    hello.incarnation = incarnation_;
    random_bytes(hello.nonce);
    return hello;
  }

  const cluster::Address& address(int rank) const {
    return config_.addresses[static_cast<std::size_t>(rank)];
  }

  void fail(std::exception_ptr error) {
    if (!failure_) failure_ = std::move(error);
    mesh_->io_.stop();
  }

  void established(int peer, int index, tcp::socket socket, std::uint64_t incarnation) {
    auto& known = peer_incarnation_[static_cast<std::size_t>(peer)];
    if (known != 0 && known != incarnation) {
      fail(std::make_exception_ptr(
          PeerFailureError(config_.rank, "rendezvous",
                           fmt::format("rank {} ({}) restarted while the group was forming", peer,
                                       address(peer).to_string()),
                           "start every rank of the group again")));
      return;
    }
    known = incarnation;
    if (!apply_options(socket)) return;
    auto& target = slots_[slot(peer, index)];
    if (!target) --missing_;
    target = std::make_unique<tcp::socket>(std::move(socket));
    if (missing_ == 0) exchange_readiness();
  }

  void connect_to(int peer) {
    for (int index = 0; index < per_peer_; ++index) {
      auto attempt = std::make_shared<Attempt>(mesh_->io_, peer, index);
      attempts_.push_back(attempt);
      connect(attempt);
    }
  }

  // ---- readiness (see the file comment) -----------------------------------------------------

  bool complete() const {
    if (missing_ > 0) return false;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      const auto& ready = readiness_[static_cast<std::size_t>(peer)];
      if (!ready.sent || !ready.received) return false;
    }
    return true;
  }

  void exchange_readiness() {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      auto& ready = readiness_[static_cast<std::size_t>(peer)];
      auto& control = *slots_[slot(peer, 0)];
      const auto generation = ready.generation;
      if (!ready.sent && !ready.writing) {
        ready.writing = true;
        asio::async_write(
            control, asio::buffer(&kMeshReady, 1),
            [this, peer, generation](std::error_code ec, std::size_t) {
              auto& state = readiness_[static_cast<std::size_t>(peer)];
              if (ec == asio::error::operation_aborted || state.generation != generation) return;
              state.writing = false;
              if (ec) return peer_left(peer);
              state.sent = true;
              if (complete()) mesh_->io_.stop();
            });
      }
      if (!ready.received && !ready.reading) {
        ready.reading = true;
        auto byte = std::make_shared<std::byte>();
        asio::async_read(
            control, asio::buffer(byte.get(), 1),
            [this, peer, generation, byte](std::error_code ec, std::size_t) {
              auto& state = readiness_[static_cast<std::size_t>(peer)];
              if (ec == asio::error::operation_aborted || state.generation != generation) return;
              state.reading = false;
              if (ec) return peer_left(peer);
              if (*byte != kMeshReady) {
                fail(std::make_exception_ptr(PeerFailureError(
                    config_.rank, "rendezvous",
                    fmt::format("rank {} ({}) sent a byte that is not the end of the "
                                "handshake",
                                peer, address(peer).to_string()),
                    "start every rank with the same strata version")));
                return;
              }
              state.received = true;
              if (complete()) mesh_->io_.stop();
            });
      }
    }
    if (complete()) mesh_->io_.stop();
  }

  // The peer's connections closed before it had its whole mesh: it died while joining. Await
  // its next incarnation.
  void peer_left(int peer) {
    departed_[peer] = "it connected, then closed its connections before the group was complete";
    forget_peer(peer);
    if (peer < config_.rank) connect_to(peer);
  }

  // False when the group cannot go on (the mesh has failed).
  bool apply_options(tcp::socket& socket) {
    std::error_code ignored;
    socket.set_option(tcp::no_delay(config_.no_delay), ignored);
    if (config_.socket_buffer_bytes > 0) {
      socket.set_option(asio::socket_base::send_buffer_size(config_.socket_buffer_bytes), ignored);
      socket.set_option(asio::socket_base::receive_buffer_size(config_.socket_buffer_bytes),
                        ignored);
    }
    // Loopback never queues or drops, so congestion control has nothing to find out there,
    // and a pacing algorithm (BBR, a common host default) only throttles the sender with
    // timers: all-reduces of 4-16 MiB took 1.4-1.9x as long on a 2-core VM. Reno is built in
    // and allowed to everyone; should the kernel refuse it anyway, its default works.
    std::string_view congestion;
    if (config_.congestion_control)
      congestion = *config_.congestion_control;
    else if (same_host(socket))
      congestion = "reno";
    if (!congestion.empty() &&
        ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                     static_cast<socklen_t>(congestion.size())) != 0 &&
        config_.congestion_control) {
      const std::error_code ec(errno, std::generic_category());
      fail(std::make_exception_ptr(ConfigurationError(
          config_.rank, "rendezvous",
          fmt::format("the kernel refused TCP congestion control '{}': {}", congestion,
                      ec.message()),
          "name one listed in /proc/sys/net/ipv4/tcp_allowed_congestion_control (load its "
          "module first), or leave congestion_control unset")));
      return false;
    }
    return true;
  }

  static bool same_host(const tcp::socket& socket) {
    std::error_code ec;
    const auto local = socket.local_endpoint(ec).address();
    if (ec) return false;
    const auto remote = socket.remote_endpoint(ec).address();
    return !ec && (remote.is_loopback() || remote == local);
  }

  // ---- accepting (peers with a higher rank) -------------------------------------------------

  void listen() {
    const cluster::Address& own = address(config_.rank);
    std::error_code ec;
    if (config_.listen_fd >= 0) {
      tcp::endpoint local;
      acceptor_.assign(tcp::v4(), config_.listen_fd, ec);
      if (!ec) local = acceptor_.local_endpoint(ec);
      if (!ec && local.address().is_v6()) {
        // assign() needs the right protocol: re-adopt as IPv6.
        const int fd = acceptor_.release(ec);
        acceptor_.assign(tcp::v6(), fd, ec);
      }
      if (ec)
        throw ConfigurationError(config_.rank, "rendezvous",
                                 fmt::format("cannot adopt the listening socket for {}: {}",
                                             own.to_string(), ec.message()),
                                 "pass a bound, listening TCP socket or none");
    } else {
      tcp::resolver resolver(mesh_->io_);
      auto endpoints =
          resolver.resolve(own.host, std::to_string(own.port), tcp::resolver::numeric_service, ec);
      if (ec || endpoints.empty())
        throw ConfigurationError(
            config_.rank, "rendezvous",
            fmt::format("cannot resolve this rank's address {}: {}", own.to_string(), ec.message()),
            "give each task a host name or IP address of its own machine");
      const tcp::endpoint endpoint = endpoints.begin()->endpoint();
      acceptor_.open(endpoint.protocol(), ec);
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(endpoint, ec);
      if (ec == asio::error::address_in_use)
        throw ConfigurationError(
            config_.rank, "rendezvous",
            fmt::format("port {} of {} is already in use", own.port, own.to_string()),
            "stop the program holding it (a previous run?) or give this task another port");
      // asio's system category maps EADDRNOTAVAIL to no std::errc condition: compare the value.
      if (ec == std::error_code(EADDRNOTAVAIL, asio::error::get_system_category()))
        throw ConfigurationError(
            config_.rank, "rendezvous",
            fmt::format("{} is not an address of this machine", own.to_string()),
            "check that the cluster spec gives this task its own host's address");
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      if (ec)
        throw ConfigurationError(
            config_.rank, "rendezvous",
            fmt::format("cannot listen on {}: {}", own.to_string(), ec.message()),
            "check the address and port given for this task");
    }
    if (config_.rank < size_ - 1) accept();  // only peers of a higher rank connect here
  }

  void accept() {
    acceptor_.async_accept([this](std::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) handshake_incoming(std::move(socket));
      accept();
    });
  }

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
    std::array<std::byte, kHelloBytes + 1 + kMacBytes> reply{};
    Mac mac{};
    std::array<std::byte, 1> status{};
  };

  // What was turned away, for the timeout message.
  void reject(const std::string& remote, std::string_view why) {
    if (rejections_.size() < 8)
      rejections_.push_back(fmt::format("{}: {}", remote, why));
    else
      ++more_rejections_;
  }

  void handshake_incoming(tcp::socket socket) {
    auto in = std::make_shared<Incoming>(std::move(socket), mesh_->io_);
    incoming_.push_back(in);
    std::error_code ec;
    const auto remote = in->socket.remote_endpoint(ec);
    in->remote = ec ? std::string("unknown peer")
                    : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    // A connection gets a bounded time to complete its handshake, so a silent one cannot
    // hold resources until the group's deadline.
    in->timer.expires_at(std::min(deadline_.time_point(), Clock::now() + kHandshakeTimeout));
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
                       on_incoming_hello(in);
                     });
  }

  HandshakeStatus judge(const Hello& theirs) const {
    if (theirs.version != kProtocolVersion) return HandshakeStatus::bad_version;
    if (theirs.cluster != config_.cluster) return HandshakeStatus::other_cluster;
    if (theirs.world_size != size_) return HandshakeStatus::world_size_differs;
    if (theirs.rank <= config_.rank || theirs.rank >= size_ || theirs.connection >= per_peer_)
      return HandshakeStatus::unexpected_rank;
    if (theirs.tunables != config_.tunables) return HandshakeStatus::tunables_differ;
    const bool has_token = (theirs.flags & Hello::kHasToken) != 0;
    if (config_.token && !has_token) return HandshakeStatus::token_required;
    if (!config_.token && has_token) return HandshakeStatus::token_unexpected;
    const auto known = peer_incarnation_[static_cast<std::size_t>(theirs.rank)];
    if (known != 0 && known != theirs.incarnation && peer_alive(theirs.rank))
      return HandshakeStatus::stale_incarnation;
    return HandshakeStatus::accepted;
  }

  // True while some established connection of `peer` is still open (a restarted process's old
  // connections are closed by its kernel).
  bool peer_alive(int peer) const {
    for (int index = 0; index < per_peer_; ++index) {
      const auto& socket = slots_[slot(peer, index)];
      if (!socket) continue;
      char byte = 0;
      const auto n = ::recv(const_cast<tcp::socket&>(*socket).native_handle(), &byte, 1,
                            MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    }
    return true;
  }

  void forget_peer(int peer) {
    for (int index = 0; index < per_peer_; ++index) {
      auto& socket = slots_[slot(peer, index)];
      if (socket) {
        socket.reset();
        ++missing_;
      }
    }
    peer_incarnation_[static_cast<std::size_t>(peer)] = 0;
    auto& ready = readiness_[static_cast<std::size_t>(peer)];
    ready = Readiness{.generation = ready.generation + 1};
  }

  void on_incoming_hello(const std::shared_ptr<Incoming>& in) {
    if (!decode(std::span<const std::byte, kHelloBytes>(in->theirs_bytes), in->theirs)) {
      reject(in->remote, "sent bytes that are not a strata handshake");
      in->abandon();
      return;
    }
    const Hello& theirs = in->theirs;
    HandshakeStatus status = judge(theirs);
    if (status == HandshakeStatus::accepted) {
      const auto known = peer_incarnation_[static_cast<std::size_t>(theirs.rank)];
      if (known != 0 && known != theirs.incarnation) forget_peer(theirs.rank);  // it restarted
    }
    const Hello mine = own_hello(theirs.connection);
    const HelloBytes mine_bytes = encode(mine);
    std::copy(mine_bytes.begin(), mine_bytes.end(), in->reply.begin());
    in->reply[kHelloBytes] = static_cast<std::byte>(status);
    Mac mac{};
    if (status == HandshakeStatus::accepted && config_.token)
      mac = handshake_mac(*config_.token, "strata-accept", in->theirs_bytes, mine_bytes);
    std::copy(mac.begin(), mac.end(), in->reply.begin() + kHelloBytes + 1);
    asio::async_write(
        in->socket, asio::buffer(in->reply),
        [this, in, status, mine_bytes](std::error_code ec, std::size_t) {
          if (ec || status != HandshakeStatus::accepted) {
            if (!ec)
              reject(in->remote,
                     fmt::format("claimed rank {}: {}", in->theirs.rank, to_string(status)));
            in->abandon();
            return;
          }
          asio::async_read(in->socket, asio::buffer(in->mac),
                           [this, in, mine_bytes](std::error_code read_ec, std::size_t) {
                             if (read_ec) {
                               in->abandon();
                               return;
                             }
                             on_incoming_mac(in, mine_bytes);
                           });
        });
  }

  void on_incoming_mac(const std::shared_ptr<Incoming>& in, const HelloBytes& mine_bytes) {
    bool authentic = true;
    if (config_.token)
      authentic = same_mac(
          in->mac, handshake_mac(*config_.token, "strata-connect", in->theirs_bytes, mine_bytes));
    in->status[0] = static_cast<std::byte>(authentic ? HandshakeStatus::accepted
                                                     : HandshakeStatus::authentication_failed);
    asio::async_write(in->socket, asio::buffer(in->status),
                      [this, in, authentic](std::error_code ec, std::size_t) {
                        if (ec || !authentic) {
                          if (!authentic)
                            reject(in->remote,
                                   fmt::format("claimed rank {}: {}", in->theirs.rank,
                                               to_string(HandshakeStatus::authentication_failed)));
                          in->abandon();
                          return;
                        }
                        in->timer.cancel();
                        established(in->theirs.rank, in->theirs.connection, std::move(in->socket),
                                    in->theirs.incarnation);
                      });
  }

  // ---- connecting (peers with a lower rank) -------------------------------------------------

  void connect(const std::shared_ptr<Attempt>& attempt) {
    const cluster::Address& target = address(attempt->peer);
    std::error_code ec;
    tcp::resolver resolver(mesh_->io_);
    auto endpoints = resolver.resolve(target.host, std::to_string(target.port),
                                      tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) {
      retry(attempt, fmt::format("cannot resolve {}: {}", target.to_string(), ec.message()));
      return;
    }
    attempt->socket = tcp::socket(mesh_->io_);
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
    attempt->mine = own_hello(attempt->index);
    attempt->mine_bytes = encode(attempt->mine);
    attempt->timer.expires_at(std::min(deadline_.time_point(), Clock::now() + kHandshakeTimeout));
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
                        asio::async_read(attempt->socket, asio::buffer(attempt->reply),
                                         [this, attempt](std::error_code read_ec, std::size_t) {
                                           if (attempt->abandoned) return;
                                           if (read_ec)
                                             return retry(attempt,
                                                          "the connection closed during the "
                                                          "handshake");
                                           on_reply(attempt);
                                         });
                      });
  }

  [[noreturn]] void refused(int peer, std::string_view why) {
    throw ConfigurationError(config_.rank, "rendezvous",
                             fmt::format("rank {} ({}) and this rank cannot form a group: {}", peer,
                                         address(peer).to_string(), why),
                             "start every rank with the same cluster spec, strata version, "
                             "TCP options and STRATA_CLUSTER_TOKEN");
  }

  void on_reply(const std::shared_ptr<Attempt>& attempt) {
    std::copy_n(attempt->reply.begin(), kHelloBytes, attempt->theirs_bytes.begin());
    Hello theirs;
    if (!decode(std::span<const std::byte, kHelloBytes>(attempt->theirs_bytes), theirs))
      return retry(attempt, "the peer answered with bytes that are not a strata handshake");
    const auto status = static_cast<HandshakeStatus>(attempt->reply[kHelloBytes]);
    try {
      switch (status) {
        case HandshakeStatus::accepted:
          break;
        case HandshakeStatus::stale_incarnation:
          return retry(attempt, std::string(to_string(status)));
        default:
          refused(attempt->peer, to_string(status));
      }
      // The acceptor must be who the cluster spec says, in the same cluster, with our token.
      if (theirs.rank != attempt->peer || theirs.world_size != size_ ||
          theirs.cluster != config_.cluster || theirs.tunables != config_.tunables ||
          theirs.version != kProtocolVersion)
        refused(attempt->peer, fmt::format("it answered as rank {} of {} with other settings",
                                           theirs.rank, theirs.world_size));
      if (config_.token) {
        Mac mac{};
        std::copy_n(attempt->reply.begin() + kHelloBytes + 1, kMacBytes, mac.begin());
        // On a wrong MAC the exchange still completes (with a MAC that cannot match), so that
        // the acceptor, too, learns that the tokens differ and can say so.
        attempt->authentic =
            same_mac(mac, handshake_mac(*config_.token, "strata-accept", attempt->mine_bytes,
                                        attempt->theirs_bytes));
        if (attempt->authentic)
          attempt->mac = handshake_mac(*config_.token, "strata-connect", attempt->mine_bytes,
                                       attempt->theirs_bytes);
      }
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    attempt->incarnation_seen = theirs.incarnation;
    asio::async_write(
        attempt->socket, asio::buffer(attempt->mac),
        [this, attempt](std::error_code ec, std::size_t) {
          if (attempt->abandoned) return;
          if (ec) return retry(attempt, ec.message());
          asio::async_read(
              attempt->socket, asio::buffer(attempt->status),
              [this, attempt](std::error_code read_ec, std::size_t) {
                if (attempt->abandoned) return;
                if (read_ec) return retry(attempt, "the connection closed during the handshake");
                auto final_status = static_cast<HandshakeStatus>(attempt->status[0]);
                if (!attempt->authentic) final_status = HandshakeStatus::authentication_failed;
                if (final_status != HandshakeStatus::accepted) {
                  fail(std::make_exception_ptr(ConfigurationError(
                      config_.rank, "rendezvous",
                      fmt::format("rank {} ({}) refused this rank: {}", attempt->peer,
                                  address(attempt->peer).to_string(), to_string(final_status)),
                      "give every rank the same STRATA_CLUSTER_TOKEN")));
                  return;
                }
                attempt->timer.cancel();
                attempt->abandoned = true;  // done: the socket moves to the mesh
                established(attempt->peer, attempt->index, std::move(attempt->socket),
                            attempt->incarnation_seen);
              });
        });
  }

  TimeoutError timeout_error() const {
    std::vector<int> missing;
    std::vector<int> unready;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      bool connected = true;
      for (int index = 0; index < per_peer_; ++index)
        if (!slots_[slot(peer, index)]) connected = false;
      if (!connected)
        missing.push_back(peer);
      else if (!readiness_[static_cast<std::size_t>(peer)].received)
        unready.push_back(peer);
    }
    const auto ranks = [](const std::vector<int>& list) {
      return fmt::format("{} {}", list.size() == 1 ? "rank" : "ranks", fmt::join(list, ", "));
    };
    std::string what;
    if (!missing.empty())
      what = fmt::format("{} did not join the group within {} ms", ranks(missing),
                         deadline_.budget().count());
    if (!unready.empty())
      fmt::format_to(std::back_inserter(what),
                     "{}{} connected but did not finish joining within {} ms (they wait for "
                     "other ranks)",
                     what.empty() ? "" : "; ", ranks(unready), deadline_.budget().count());
    for (int peer : missing) {
      auto found = last_connect_error_.find(peer);
      if (found != last_connect_error_.end())
        fmt::format_to(std::back_inserter(what), "; connecting to rank {} at {}: {}", peer,
                       address(peer).to_string(), found->second);
      auto left = departed_.find(peer);
      if (left != departed_.end())
        fmt::format_to(std::back_inserter(what), "; rank {}: {}", peer, left->second);
    }
    if (!rejections_.empty())
      fmt::format_to(std::back_inserter(what), "; turned away: {}{}", fmt::join(rejections_, "; "),
                     more_rejections_ > 0 ? fmt::format(" (and {} more)", more_rejections_) : "");
    return TimeoutError(config_.rank, "rendezvous", what,
                        "start every rank of the cluster (the missing ones are listed), check "
                        "their addresses, or raise the deadline (STRATA_TIMEOUT)");
  }

  static constexpr std::chrono::seconds kHandshakeTimeout{10};

  MeshConfig config_;
  Deadline deadline_;
  int size_;
  int per_peer_;
  std::unique_ptr<Mesh> mesh_;
  tcp::acceptor acceptor_;
  std::uint64_t incarnation_ = 0;
  std::vector<std::unique_ptr<tcp::socket>> slots_;
  std::vector<std::uint64_t> peer_incarnation_;
  int missing_ = 0;
  std::exception_ptr failure_;
  std::vector<std::string> rejections_;
  int more_rejections_ = 0;
  std::map<int, std::string> last_connect_error_;
  std::map<int, std::string> departed_;
  std::vector<Readiness> readiness_;
  std::vector<std::weak_ptr<Attempt>> attempts_;
  std::vector<std::weak_ptr<Incoming>> incoming_;
  std::minstd_rand random_{std::random_device{}()};
};

inline std::unique_ptr<Mesh> form_mesh(const MeshConfig& config, Deadline deadline) {
  return MeshBuilder(config, deadline).build();
}

}  // namespace strata::transport::tcp
