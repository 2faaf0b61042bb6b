// strata/cluster/impl/resolve.ipp — resolve_cluster's definitions. Included at the end of
// cluster/resolve.hpp (header-only) or by impl/src.hpp after it (compiled), never on its own.
#pragma once

#include <charconv>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/tf_config.hpp>

namespace strata::cluster {

namespace detail::resolve {

inline int local_rank_in(const std::vector<Address>& addresses, int rank) {
  int local = 0;
  for (int r = 0; r < rank; ++r)
    if (addresses[static_cast<std::size_t>(r)].host ==
        addresses[static_cast<std::size_t>(rank)].host)
      ++local;
  return local;
}

inline ResolvedCluster from_spec(std::string source, ClusterSpec cluster, Task task) {
  if (!cluster.contains(task))
    throw ConfigurationError(-1, source,
                             fmt::format("task {} {} is not in the cluster {}",
                                         to_string(task.type), task.index, cluster.canonical()),
                             "give a task that the cluster lists");
  ResolvedCluster resolved;
  resolved.source = std::move(source);
  resolved.task = task;
  const auto rank = cluster.collective_rank(task);
  resolved.rank = rank ? *rank : -1;
  resolved.size = cluster.collective_size();
  if (rank) {
    resolved.addresses = cluster.collective_addresses();
    resolved.local_rank = local_rank_in(resolved.addresses, *rank);
  } else {
    resolved.addresses.clear();
  }
  resolved.cluster = std::move(cluster);
  return resolved;
}

inline ResolvedCluster from_launcher(const LauncherEnvironment& launcher,
                                     const ResolveOptions& options) {
  ResolvedCluster resolved;
  resolved.source = launcher.launcher;
  resolved.rank = launcher.rank;
  resolved.size = launcher.world_size;
  resolved.local_rank = launcher.local_rank;
  resolved.task = {TaskType::worker, launcher.rank};
  if (launcher.world_size == 1) return resolved;  // one process: no peers, no exchange
  if (!options.exchange)
    throw UsageError(launcher.rank, launcher.launcher,
                     fmt::format("{} says where rank 0 runs but not where the other ranks listen, "
                                 "and ResolveOptions::exchange is unset",
                                 launcher.launcher),
                     "call strata::resolve_cluster() (strata/resolve.hpp), which exchanges the "
                     "addresses through rank 0's TCP store, or set ResolveOptions::exchange");
  auto exchanged = options.exchange(launcher, options.timeout);
  for (int r = 0; r < launcher.world_size; ++r)
    resolved.cluster.add({TaskType::worker, r}, exchanged.addresses[static_cast<std::size_t>(r)]);
  resolved.addresses = resolved.cluster.collective_addresses();
  resolved.listener = std::move(exchanged.listener);
  return resolved;
}

/// STRATA_LOCAL_REPLICAS, else 1.
inline int local_replicas_in(const Environment& env) {
  const auto text = env("STRATA_LOCAL_REPLICAS");
  if (!text || text->empty()) return 1;
  int value = 0;
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc{} || end != text->data() + text->size() || value < 1 || value > 4096)
    throw ConfigurationError(-1, "STRATA_LOCAL_REPLICAS",
                             fmt::format("'{}' is not a number of replicas", *text),
                             "set a positive integer, e.g. STRATA_LOCAL_REPLICAS=2");
  return value;
}

inline ResolvedCluster resolve_source(ResolveOptions& options) {
  if (options.cluster && options.task)
    return from_spec("explicit", std::move(*options.cluster), *options.task);
  if (options.cluster || options.task)
    throw UsageError(-1, "resolve_cluster", "only one of ResolveOptions::cluster and ::task is set",
                     "set both, or neither to read the environment");
  const Environment& env = options.environment;
  if (const auto text = env("TF_CONFIG"); text && !text->empty()) {
    TfConfig config = parse_tf_config(*text);
    Task task{TaskType::worker, 0};
    if (config.task) {
      task = *config.task;
    } else if (config.cluster.collective_size() != 1) {
      throw ConfigurationError(-1, "TF_CONFIG", "TF_CONFIG has a cluster but no \"task\"",
                               "add \"task\": {\"type\": \"worker\", \"index\": N} for this "
                               "process");
    } else {
      task = config.cluster.collective_task(0);
    }
    return from_spec("TF_CONFIG", std::move(config.cluster), task);
  }
  for (auto* detect : {&torchrun_environment, &openmpi_environment, &slurm_environment})
    if (const auto launcher = (*detect)(env)) return from_launcher(*launcher, options);
  return ResolvedCluster{};
}

}  // namespace detail::resolve

STRATA_DECL ResolvedCluster resolve_cluster(ResolveOptions options) {
  ResolvedCluster resolved = detail::resolve::resolve_source(options);
  resolved.local_replicas = detail::resolve::local_replicas_in(options.environment);
  return resolved;
}

}  // namespace strata::cluster
