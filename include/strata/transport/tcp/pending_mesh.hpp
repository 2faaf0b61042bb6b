// strata/transport/tcp/pending_mesh.hpp — a mesh while it forms: the connections up so far,
// each peer's incarnation, and the kMeshReady exchange that ends the forming.
//
// The listener (listener.hpp) and the connector (connector.hpp) hand it each connection that
// passed its handshake. A rank holding all its connections sends kMeshReady to every peer and
// is done once every peer has sent its own: no rank starts collectives while another is still
// forming its mesh. So a peer whose connections close before its kMeshReady died while joining
// (a restarted worker's first incarnation): it is forgotten and its next incarnation awaited. A
// peer that finished joining, ran ahead and failed is never mistaken for one.
#pragma once

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/congestion.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/mesh.hpp>

namespace strata::transport::tcp {

/// The state of one rank's mesh while it forms; every handler runs on the mesh's io_context.
class PendingMesh {
 public:
  using tcp = asio::ip::tcp;

  PendingMesh(const MeshConfig& config, Deadline deadline)
      : config_(config),
        deadline_(deadline),
        size_(static_cast<int>(config.addresses.size())),
        per_peer_(1 + config.data_connections),
        mesh_(new Mesh(config.rank, size_, config.data_connections)) {
    std::array<std::byte, 8> incarnation{};
    random_bytes(incarnation);
    incarnation_ = detail::load_le<std::uint64_t>(incarnation.data());
    slots_.resize(static_cast<std::size_t>(size_ * per_peer_));
    peer_incarnation_.assign(static_cast<std::size_t>(size_), 0);
    readiness_.resize(static_cast<std::size_t>(size_));
    missing_ = (size_ - 1) * per_peer_;
  }
  PendingMesh(const PendingMesh&) = delete;
  PendingMesh& operator=(const PendingMesh&) = delete;

  const MeshConfig& config() const noexcept { return config_; }
  Deadline deadline() const noexcept { return deadline_; }
  int size() const noexcept { return size_; }
  /// Connections per peer: the control connection and the data connections.
  int per_peer() const noexcept { return per_peer_; }
  asio::io_context& io() noexcept { return mesh_->io_; }
  const cluster::Address& address(int rank) const {
    return config_.addresses[static_cast<std::size_t>(rank)];
  }
  /// How a peer of a lower rank is connected to again when it left while joining (the
  /// connector's connect_to; set before the mesh forms).
  void on_reconnect(std::function<void(int)> reconnect) { reconnect_ = std::move(reconnect); }

  /// This rank's Hello for connection `index`, with a fresh nonce.
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

  /// Ends the forming with `error` (the first one is kept).
  void fail(std::exception_ptr error) {
    if (!failure_) failure_ = std::move(error);
    mesh_->io_.stop();
  }
  const std::exception_ptr& failure() const noexcept { return failure_; }

  /// Takes a connection that passed its handshake; once every connection is up, starts the
  /// kMeshReady exchange.
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

  /// The acceptor's first answer to `theirs`: with a token of its own it tells a stranger only
  /// whether the protocol and the token's presence match, and challenges it; without one it
  /// judges at once.
  HandshakeStatus screen(const Hello& theirs) const {
    if (theirs.version != kProtocolVersion) return HandshakeStatus::bad_version;
    if (!config_.token) return judge(theirs);
    if ((theirs.flags & Hello::kHasToken) == 0) return HandshakeStatus::token_required;
    return HandshakeStatus::challenge;
  }

  /// Whether the acceptor takes the connection whose Hello is `theirs` (after the challenge,
  /// when there is a token).
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

  /// The incarnation of `peer` whose connections this mesh holds; 0 for none.
  std::uint64_t peer_incarnation(int peer) const noexcept {
    return peer_incarnation_[static_cast<std::size_t>(peer)];
  }

  /// Drops every connection of `peer` and its part of the kMeshReady exchange.
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

  /// True when this rank connects to no one and no one to it (a group of one).
  bool alone() const noexcept { return missing_ == 0; }

  /// Every connection is up and every kMeshReady sent and received.
  bool complete() const {
    if (missing_ > 0) return false;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      const auto& ready = readiness_[static_cast<std::size_t>(peer)];
      if (!ready.sent || !ready.received) return false;
    }
    return true;
  }

  // For the timeout message: what is known of `peer`.
  bool connected(int peer) const {
    for (int index = 0; index < per_peer_; ++index)
      if (!slots_[slot(peer, index)]) return false;
    return true;
  }
  bool said_ready(int peer) const { return readiness_[static_cast<std::size_t>(peer)].received; }
  const std::map<int, std::string>& departed() const noexcept { return departed_; }

  /// The mesh, for a group of one.
  std::unique_ptr<Mesh> release() { return std::move(mesh_); }

  /// The complete mesh: every connection moved into it, non-blocking.
  std::unique_ptr<Mesh> finish() {
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
  // The kMeshReady exchange with one peer, over its current control connection.
  struct Readiness {
    bool sent = false;      // our kMeshReady is written
    bool writing = false;   // ... or on its way
    bool received = false;  // theirs arrived
    bool reading = false;
    std::uint64_t generation = 0;  // bumped when the peer is forgotten: stale handlers ignore
  };

  std::size_t slot(int peer, int index) const noexcept {
    return static_cast<std::size_t>(peer * per_peer_ + index);
  }

  void exchange_readiness() {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == config_.rank) continue;
      auto& ready = readiness_[static_cast<std::size_t>(peer)];
      auto& control = *slots_[slot(peer, 0)];
      if (!ready.sent && !ready.writing) send_ready(peer, control);
      if (!ready.received && !ready.reading) read_ready(peer, control);
    }
    if (complete()) mesh_->io_.stop();
  }

  void send_ready(int peer, tcp::socket& control) {
    auto& ready = readiness_[static_cast<std::size_t>(peer)];
    const auto generation = ready.generation;
    ready.writing = true;
    asio::async_write(control, asio::buffer(&kMeshReady, 1),
                      [this, peer, generation](std::error_code ec, std::size_t) {
                        auto& state = readiness_[static_cast<std::size_t>(peer)];
                        if (ec == asio::error::operation_aborted || state.generation != generation)
                          return;
                        state.writing = false;
                        if (ec) return peer_left(peer);
                        state.sent = true;
                        if (complete()) mesh_->io_.stop();
                      });
  }

  void read_ready(int peer, tcp::socket& control) {
    auto& ready = readiness_[static_cast<std::size_t>(peer)];
    const auto generation = ready.generation;
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
                fmt::format("rank {} ({}) sent a byte that is not the end of the handshake", peer,
                            address(peer).to_string()),
                "start every rank with the same strata version")));
            return;
          }
          state.received = true;
          if (complete()) mesh_->io_.stop();
        });
  }

  // The peer's connections closed before it had its whole mesh: it died while joining. Await
  // its next incarnation.
  void peer_left(int peer) {
    departed_[peer] = "it connected, then closed its connections before the group was complete";
    forget_peer(peer);
    if (peer < config_.rank) reconnect_(peer);
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
    if (const std::error_code ec = choose_congestion_control(socket, config_.congestion_control)) {
      fail(std::make_exception_ptr(ConfigurationError(
          config_.rank, "rendezvous",
          fmt::format("the kernel refused TCP congestion control '{}': {}",
                      *config_.congestion_control, ec.message()),
          "name one listed in /proc/sys/net/ipv4/tcp_allowed_congestion_control (load its "
          "module first), or leave congestion_control unset")));
      return false;
    }
    return true;
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

  MeshConfig config_;
  Deadline deadline_;
  int size_;
  int per_peer_;
  std::unique_ptr<Mesh> mesh_;  // before the sockets below: they are destroyed before its io
  std::uint64_t incarnation_ = 0;
  std::vector<std::unique_ptr<tcp::socket>> slots_;  // per (peer, connection index)
  std::vector<std::uint64_t> peer_incarnation_;
  int missing_ = 0;  // connections not up yet
  std::exception_ptr failure_;
  std::map<int, std::string> departed_;
  std::vector<Readiness> readiness_;
  std::function<void(int)> reconnect_;
};

}  // namespace strata::transport::tcp
