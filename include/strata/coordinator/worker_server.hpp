// strata/coordinator/worker_server.hpp — a worker task serving a ClusterCoordinator: it runs the
// registered functions (functions.hpp) the coordinator sends, one at a time.
//
// This header declares; the definitions (and the TCP transport under them) are in
// coordinator/impl/worker_server.ipp, compiled into every unit header-only or once into
// strata::compiled (config.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/config.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/core/deadline.hpp>

namespace strata::coordinator {

/// Options of a worker's server. Plain data: set the fields you care about.
struct WorkerOptions {
  /// The secret the coordinator must prove; unset: read STRATA_CLUSTER_TOKEN.
  std::optional<std::string> cluster_token{};
  /// How long the worker waits with no coordinator connected before it gives up, and how long
  /// a request may take to arrive once it has begun. Defaults to STRATA_TIMEOUT when set, else
  /// 60 s.
  std::chrono::milliseconds timeout = default_timeout();
  /// The largest request (a function's arguments) a coordinator may send.
  std::uint32_t max_message_bytes = 0xFFFF'FFFFu;
};

/// What a worker's server did.
struct WorkerReport {
  std::uint64_t functions_run = 0;     ///< functions that returned
  std::uint64_t functions_failed = 0;  ///< functions that raised (the coordinator got the error)
  std::uint64_t resources_built = 0;   ///< per-worker resources built
  std::uint64_t refused = 0;           ///< connections refused (handshake, garbage)
};

/// Worker task `index` of `cluster`, serving the coordinator on its address. The functions run
/// on the serving thread; `functions` must outlive the server.
///
/// Thread safety: `stop` may be called from any thread; the rest from one.
class WorkerServer {
 public:
  /// @throws ConfigurationError when the task is not in the cluster, or its address cannot be
  ///   bound.
  STRATA_DECL WorkerServer(const cluster::ClusterSpec& cluster, int index,
                           const Functions& functions, WorkerOptions options = {});
  STRATA_DECL ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  STRATA_DECL std::uint16_t port() const noexcept;

  /// Serves until the coordinator says it finished (ClusterCoordinator::shutdown), or `stop()`;
  /// per-worker resources are destroyed before it returns.
  /// @throws TimeoutError when no coordinator has been connected for `options.timeout`;
  ///   PeerFailureError naming the ps task when the coordinator reports that one failed.
  STRATA_DECL WorkerReport serve();

  /// Makes `serve` return soon (from any thread).
  STRATA_DECL void stop();

 private:
  struct State;  // coordinator/impl/worker_server.ipp
  std::unique_ptr<State> state_;
};

}  // namespace strata::coordinator

#if STRATA_HEADER_ONLY
#include <strata/coordinator/impl/worker_server.ipp>
#endif
