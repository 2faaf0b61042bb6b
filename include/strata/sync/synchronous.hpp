// strata/sync/synchronous.hpp — every step, every replica's gradient reaches the variables.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/sync/detail/check_size.hpp>

namespace strata::sync {

/// Synchronous training (tf.distribute's default): at each `apply_gradients` the gradients of
/// all replicas are aggregated (by the variable's `VariableAggregation`) before any replica
/// applies them, so the model equals single-replica training on the global batch.
///
/// By the placement's `UpdateSite`:
///   - every_replica (Mirrored): all-reduce the gradient in place, then every replica applies
///     the same update to its own copy. No copy of the gradient is made.
///   - one_replica (CentralStorage, OneDevice, Default): reduce the gradient in place to
///     replica 0, which applies the update, and the others wait for it.
///   - servers (ParameterServer; TF1's SyncReplicasOptimizer): every replica pushes its
///     gradient of the step; the servers add them up in replica order once all are in, apply the
///     optimizer once and answer every replica with the new values. Replicas of different
///     workers wait for each other through the servers only; every worker must run the same
///     number of steps.
struct Synchronous {
  static constexpr std::string_view kName = "Synchronous";
  static constexpr bool kWaitsForAllReplicas = true;

  /// Aggregates `gradient` over the replicas and applies `optimizer` to `variable`.
  /// The gradient buffer is reduced in place (it holds the aggregated gradient afterwards on
  /// every replica for every_replica placements, on replica 0 otherwise).
  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    using P = typename Context::placement_type;
    detail::check_size(context, "apply_gradients", gradient.size(), variable.size());
    const bool many = context.num_replicas_in_sync() > 1;
    auto& communicator = context.communicator();
    const auto aggregation = variable.aggregation();
    const bool first_only = aggregation == placement::VariableAggregation::only_first_replica;
    if (many) require_aggregation(context, "apply_gradients", aggregation);
    if constexpr (P::kUpdateSite == placement::UpdateSite::servers) {
      if (many && first_only)
        throw UsageError(context.replica_id_in_sync_group(), "apply_gradients",
                         "synchronous training over parameter servers aggregates every "
                         "replica's gradient, and the variable takes only the first replica's",
                         "create the variable with VariableAggregation::sum or mean");
      ps::SyncSpec sync;
      sync.mode = ps::SyncSpec::Mode::synchronous;
      sync.aggregation = aggregation == placement::VariableAggregation::mean
                             ? ps::SyncSpec::Aggregation::mean
                             : ps::SyncSpec::Aggregation::sum;
      sync.replica = static_cast<std::uint32_t>(context.replica_id_in_sync_group());
      sync.replicas = static_cast<std::uint32_t>(context.num_replicas_in_sync());
      sync.bound = sync.replicas;
      P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient), sync);
    } else if constexpr (P::kUpdateSite == placement::UpdateSite::every_replica) {
      if (many) {
        if (first_only)
          communicator.broadcast(gradient, 0);
        else
          communicator.all_reduce(gradient, reduce_op(aggregation));
      }
      P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient));
    } else {
      if (many) {
        // Either collective also guarantees every replica has finished reading the old value.
        if (first_only)
          communicator.barrier();
        else
          communicator.reduce(gradient, reduce_op(aggregation), 0);
      }
      P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient));
      if (many) communicator.barrier();  // nobody reads the shared copy before it is updated
    }
  }

  /// Replica-context assignment: sets the variable to the aggregation of every replica's
  /// `value` (or replica 0's, for only_first_replica).
  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    using P = typename Context::placement_type;
    detail::check_size(context, "assign", value.size(), variable.size());
    const int replica = context.replica_id_in_sync_group();
    const bool many = context.num_replicas_in_sync() > 1;
    auto& communicator = context.communicator();
    const auto aggregation = variable.aggregation();
    if (many) require_aggregation(context, "assign", aggregation);
    const bool first_only = aggregation == placement::VariableAggregation::only_first_replica;
    if constexpr (P::kUpdateSite == placement::UpdateSite::servers) {
      // The servers hold one value: the replicas write it (the last writer wins); only the
      // first replica's under only_first_replica.
      if (!first_only || replica == 0) P::store(variable, context.local_replica_id(), value);
      return;
    }
    const std::span<T> target = P::write_target(variable, context.local_replica_id());
    if (!many) {
      placement::copy_values<P, T>(value, target);
      return;
    }
    if constexpr (P::kUpdateSite == placement::UpdateSite::every_replica) {
      if (first_only)
        communicator.broadcast(value, target, 0);
      else
        communicator.all_reduce(value, target, reduce_op(aggregation));
    } else {
      if (first_only) {
        communicator.barrier();  // every replica has finished reading the old value
        if (replica == 0) placement::copy_values<P, T>(value, target);
      } else {
        communicator.reduce(value, target, reduce_op(aggregation), 0);
      }
      communicator.barrier();  // nobody reads the shared copy before it is written
    }
  }

 private:
  static ReduceOp reduce_op(placement::VariableAggregation aggregation) noexcept {
    return aggregation == placement::VariableAggregation::sum ? ReduceOp::sum : ReduceOp::mean;
  }

  template <class Context>
  static void require_aggregation(Context& context, std::string_view operation,
                                  placement::VariableAggregation aggregation) {
    if (aggregation != placement::VariableAggregation::none) return;
    throw UsageError(context.replica_id_in_sync_group(), operation,
                     fmt::format("the variable has aggregation 'none' but {} replicas update it",
                                 context.num_replicas_in_sync()),
                     "create the variable with VariableAggregation::mean, sum or "
                     "only_first_replica");
  }
};

}  // namespace strata::sync
