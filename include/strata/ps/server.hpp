// strata/ps/server.hpp — a parameter server: one ps task serving variable shards over TCP.
//
// This header declares; the definitions (and the asio under them) are in ps/impl/server.ipp,
// compiled into every unit header-only or once into strata::compiled (config.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/config.hpp>
#include <strata/core/deadline.hpp>

namespace strata::ps {

/// Options of a parameter server. Plain data: set the fields you care about.
struct ServerOptions {
  /// The secret every connection must prove (the TCP transport's handshake); unset: read
  /// STRATA_CLUSTER_TOKEN, and without it accept connections of this cluster unauthenticated.
  std::optional<std::string> cluster_token{};
  /// How long the server waits with no worker connected before it gives up (workers that
  /// crashed without saying they finished), and how long one request may take to arrive once
  /// it has begun. Defaults to STRATA_TIMEOUT when set, else 60 s.
  std::chrono::milliseconds timeout = default_timeout();
  /// The largest request a connection may send (a shard's values plus a few bytes); a frame
  /// announcing more is hostile or broken, and its connection is dropped.
  std::uint32_t max_message_bytes = 0xFFFF'FFFFu;
};

/// What a server did, for logs and the benchmarks' load report.
struct ServerReport {
  std::size_t shards = 0;         ///< shards created
  std::uint64_t shard_bytes = 0;  ///< bytes of values held (optimizer slots not counted)
  std::uint64_t requests = 0;     ///< requests answered
  std::uint64_t bytes_in = 0;     ///< payload bytes received
  std::uint64_t bytes_out = 0;    ///< payload bytes sent
  /// Values read from and written to the shared regions of workers on this host, instead of
  /// the sockets (ps/protocol.hpp, attach_region).
  std::uint64_t region_bytes = 0;
  std::uint64_t refused = 0;            ///< connections refused or dropped (handshake, garbage)
  std::uint64_t stale_gradients = 0;    ///< synchronous gradients that came after their step
  std::chrono::nanoseconds cpu_time{};  ///< CPU time of the serving thread
};

/// Parameter-server task `index` of `cluster`: binds its address at construction, then serves
/// the workers of the cluster's collective group (chief and workers) from `serve()`, on the
/// calling thread. Shards live in memory and are updated one request at a time, so every push
/// applies atomically. A worker that sends garbage, a request of the wrong size or type, or
/// names an unknown shard gets an error (or loses its connection, for bytes that are not strata
/// frames); everyone else is served on.
///
/// Thread safety: `stop` may be called from any thread; the rest from one.
class Server {
 public:
  /// @throws ConfigurationError when the task is not in the cluster, the cluster has no
  ///   worker, or the address cannot be bound (port in use, not an address of this host).
  STRATA_DECL Server(const cluster::ClusterSpec& cluster, int index, ServerOptions options = {});
  STRATA_DECL ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port the server listens on.
  STRATA_DECL std::uint16_t port() const noexcept;

  /// Serves until every task of the collective group has said it finished (`done`), then
  /// returns what it did; or until `stop()`.
  /// @throws TimeoutError when no worker has been connected for `options.timeout` while some
  ///   have not finished (naming them).
  STRATA_DECL ServerReport serve();

  /// Makes `serve` return soon (from any thread).
  STRATA_DECL void stop();

 private:
  struct State;  // ps/impl/server.ipp
  std::unique_ptr<State> state_;
};

}  // namespace strata::ps

#if STRATA_HEADER_ONLY
#include <strata/ps/impl/server.ipp>
#endif
