// strata/serve_if_worker.hpp — the same program on every task: under a ClusterCoordinator, the
// workers serve the functions it schedules.
#pragma once

#include <strata/cluster/resolve.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/coordinator/worker_server.hpp>

namespace strata::coordinator {

/// Serves the chief's ClusterCoordinator if this process is a worker task of its cluster
/// (TF_CONFIG "task": {"type": "worker"}), and returns true once the coordinator has finished;
/// returns false at once on any other task. Register the functions first, the same way on
/// every task, as TF2 programs call `server.join()` on workers:
/// @code
///   int main() {
///     strata::coordinator::Functions functions;
///     const auto step = functions.add("step", ...);
///     if (strata::ps::serve_if_ps()) return 0;
///     if (strata::coordinator::serve_if_worker(functions)) return 0;
///     strata::coordinator::ClusterCoordinator coordinator;  // the chief
///     ...
///   }
/// @endcode
/// @throws ConfigurationError for a malformed cluster or an address it cannot bind;
///   TimeoutError when no coordinator has been connected for `options.timeout`.
inline bool serve_if_worker(const Functions& functions, WorkerOptions options = {}) {
  const cluster::ResolvedCluster resolved = cluster::resolve_cluster();
  if (resolved.task.type != cluster::TaskType::worker) return false;
  WorkerServer(resolved.cluster, resolved.task.index, functions, std::move(options)).serve();
  return true;
}

}  // namespace strata::coordinator
