// strata/sync/detail/server_sync.hpp — how a synchronous push meets the parameter servers:
// aggregated with the other replicas' pushes of its step.
#pragma once

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/protocol.hpp>

namespace strata::sync::detail {

/// The SyncSpec of a synchronous push of `variable` by the context's replica: each step
/// aggregates the gradients of every replica but `backups` (TF1's replicas_to_aggregate =
/// replicas − backups). `policy` names the sync policy in messages.
/// @throws UsageError for an only_first_replica variable of several replicas, or when the
///   backups leave no replica to aggregate.
template <class Context, class Variable>
ps::SyncSpec synchronous_server_sync(Context& context, const Variable& variable, int backups,
                                     std::string_view policy) {
  const int replicas = context.num_replicas_in_sync();
  if (replicas > 1 && variable.aggregation() == placement::VariableAggregation::only_first_replica)
    throw UsageError(context.replica_id_in_sync_group(), "apply_gradients",
                     fmt::format("{} training over parameter servers aggregates the replicas' "
                                 "gradients, and the variable takes only the first replica's",
                                 policy),
                     "create the variable with VariableAggregation::sum or mean");
  if (backups >= replicas)
    throw UsageError(context.replica_id_in_sync_group(), "apply_gradients",
                     fmt::format("{} with {} backup replicas leaves none of the {} replicas to "
                                 "aggregate",
                                 policy, backups, replicas),
                     "run more replicas than backups (a step aggregates replicas − backups "
                     "gradients)");
  ps::SyncSpec sync;
  sync.mode = ps::SyncSpec::Mode::synchronous;
  sync.aggregation = variable.aggregation() == placement::VariableAggregation::mean
                         ? ps::SyncSpec::Aggregation::mean
                         : ps::SyncSpec::Aggregation::sum;
  sync.replica = static_cast<std::uint32_t>(context.replica_id_in_sync_group());
  sync.replicas = static_cast<std::uint32_t>(replicas);
  sync.bound = static_cast<std::uint32_t>(replicas - backups);
  return sync;
}

}  // namespace strata::sync::detail
