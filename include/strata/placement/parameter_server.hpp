// strata/placement/parameter_server.hpp — variables sharded over the parameter servers of the
// cluster (tf.distribute's ParameterServerStrategy placement).
#pragma once

#include <chrono>
#include <concepts>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/core/error.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/sharded_variable.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/session.hpp>
#include <strata/ps/shard_placement.hpp>

namespace strata::placement {

/// Variables live on the cluster's ps tasks, split by `PartitionerType` (TF's partitioners,
/// ps/partitioner.hpp; unsharded by default) and placed by `PlacementPolicy` (TF2's round robin
/// by default, or TF1's greedy by bytes); each replica works on a copy it refreshes from the
/// servers with every update. `Rule` says who applies the optimizer by default: the servers,
/// with their slots next to each shard (TF), or the worker, the servers summing the changes
/// (BytePS); a variable may choose otherwise (Strategy::create_variable with a rule).
///
/// Replicas of different workers never wait for each other: each pushes its own gradients
/// (between-graph replication). A strategy over this placement opens a session with the servers
/// (`open_session`) and tells them when its worker has finished.
template <ps::Partitioner PartitionerType = ps::NoPartitioner,
          ps::ShardPlacement PlacementPolicy = ps::RoundRobinPlacement,
          ps::UpdateRule Rule = ps::UpdateRule::optimizer>
struct ParameterServer {
  static constexpr std::string_view kName = "ParameterServer";
  static constexpr int kMaxReplicas = std::numeric_limits<int>::max();
  static constexpr UpdateSite kUpdateSite = UpdateSite::servers;

  using session_type = ps::Session<PartitionerType, PlacementPolicy>;
  template <std::floating_point T>
  using variable_type = ShardedVariable<T>;

  /// Connects this worker to the servers of `cluster`, with a lane per local replica.
  /// @throws UsageError on a ps task or outside a cluster with ps tasks; the client's errors.
  static std::unique_ptr<session_type> open_session(const cluster::ResolvedCluster& cluster,
                                                    int local_replicas,
                                                    std::chrono::milliseconds timeout) {
    if (cluster.task.type == cluster::TaskType::ps)
      throw UsageError(-1, "ParameterServer",
                       fmt::format("this process is ps task {}: it serves, it does not train",
                                   cluster.task.index),
                       "call strata::ps::serve_if_ps() at the start of main, before creating "
                       "the strategy");
    if (!cluster.in_collective_group() || cluster.cluster.num_tasks(cluster::TaskType::ps) == 0)
      throw UsageError(
          cluster.rank, "ParameterServer",
          fmt::format("the cluster ({}) has no parameter server to hold variables",
                      cluster.cluster.empty() ? std::string("none") : cluster.cluster.canonical()),
          "start the job with ps tasks (e.g. strata-launch --ps 2), each running "
          "strata::ps::serve_if_ps() or strata-ps");
    return std::make_unique<session_type>(cluster.cluster, cluster.rank, local_replicas,
                                          ps::ClientOptions{.timeout = timeout});
  }

  /// A variable on the servers, updated under `rule` (the placement's by default).
  template <std::floating_point T>
  static ShardedVariable<T> create(session_type& session, std::span<const T> initial,
                                   VariableAggregation aggregation, ps::UpdateRule rule = Rule) {
    return create_sharded<T>(session, initial, aggregation, rule);
  }
  template <std::floating_point T>
  static std::span<const T> read(const ShardedVariable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  template <std::floating_point T>
  static std::span<T> write_target(ShardedVariable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  /// Replica `local_replica`'s update: pushed to the servers, the new values pulled back, when
  /// `sync` lets them answer (at once by default).
  template <class O, std::floating_point T>
  static void apply(ShardedVariable<T>& variable, int local_replica, const O& optimizer,
                    std::span<const T> gradient, const ps::SyncSpec& sync = {}) {
    variable.push_pull(local_replica, optimizer, gradient, sync);
  }
  /// Replica `local_replica`'s updates of several variables, each as `apply` does it, in one
  /// batch of requests to the servers (ShardedVariable::push_pull_all).
  template <class O, std::floating_point T>
  static void apply_all(int local_replica, const O& optimizer,
                        std::span<ShardedVariable<T>* const> variables,
                        std::span<const std::span<const T>> gradients,
                        std::span<const ps::SyncSpec> syncs) {
    ShardedVariable<T>::push_pull_all(local_replica, optimizer, variables, gradients, syncs);
  }
  /// Replica `local_replica`'s assignment: written to the servers.
  template <std::floating_point T>
  static void store(ShardedVariable<T>& variable, int local_replica, std::span<const T> values) {
    variable.store(local_replica, values);
  }
};

}  // namespace strata::placement
