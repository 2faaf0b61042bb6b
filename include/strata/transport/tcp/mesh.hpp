// strata/transport/tcp/mesh.hpp — the formed mesh: one rank's TCP connections to every other rank.
//
// Every pair of ranks is joined by 1 + K connections: connection 0 carries control messages
// (abort reasons, timeout notices, goodbyes, releases of lent pages) and is always at a message
// boundary; connections 1..K carry data. form_mesh.hpp forms the mesh; group.hpp and link.hpp
// use it. By the time a Mesh exists every connection has passed its handshake and every socket
// is non-blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>

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
  friend class PendingMesh;  // pending_mesh.hpp fills the mesh while it forms
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

}  // namespace strata::transport::tcp
