// strata/serve_if_ps.hpp — the same program on every task: ps tasks serve, the others train.
#pragma once

#include <strata/cluster/resolve.hpp>
#include <strata/ps/server.hpp>
#include <strata/resolve.hpp>

namespace strata::ps {

/// Serves this process's variables if it is a ps task of its cluster (TF_CONFIG "task":
/// {"type": "ps"}), and returns true once every worker has finished; returns false at once on
/// any other task, which goes on to train. Call it first in `main`, as TF2 programs call
/// `server.join()` on ps tasks:
/// @code
///   int main() {
///     if (strata::ps::serve_if_ps()) return 0;
///     strata::ParameterServerStrategy strategy;
///     ...
///   }
/// @endcode
/// @throws ConfigurationError for a malformed cluster or an address it cannot bind;
///   TimeoutError when no worker has been connected for `options.timeout` while some have not
///   finished (see ps::Server::serve).
inline bool serve_if_ps(ServerOptions options = {}) {
  const cluster::ResolvedCluster resolved = strata::resolve_cluster();
  if (resolved.task.type != cluster::TaskType::ps) return false;
  Server(resolved.cluster, resolved.task.index, std::move(options)).serve();
  return true;
}

}  // namespace strata::ps
