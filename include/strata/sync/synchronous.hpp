// strata/sync/synchronous.hpp — every step, every replica's gradient reaches the variables.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/replica_group.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/fusion/gradient_buckets.hpp>
#include <strata/placement/adopted_variable.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/sync/detail/apply_on_servers.hpp>
#include <strata/sync/detail/check_size.hpp>
#include <strata/sync/detail/server_sync.hpp>
#include <strata/sync/detail/step_readiness.hpp>

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
    if (many) detail::require_aggregation(context, "apply_gradients", aggregation);
    if constexpr (P::kUpdateSite == placement::UpdateSite::servers) {
      P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient),
               server_sync(context, variable));
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

  /// One step of the list form of apply_gradients, its gradients made ready one by one as the
  /// trainer's backward pass produces them (ReplicaContext::begin_apply_gradients). On host
  /// memory and outside the servers, the gradients of variables that sum or average them are
  /// all-reduced in fused buckets (ReplicaContext::fused_buckets), each bucket launched as soon
  /// as it is full, so communication overlaps the rest of backward; `apply()` waits and
  /// updates every variable as the one-variable form does. Elsewhere `apply()` runs the
  /// one-variable form for each entry.
  ///
  /// Collectives start in the same order on every replica whatever order gradients become
  /// ready in: summed gradients' buckets first, then averaged ones' (a ready averaged gradient
  /// waits until every summed one is ready), each in its bucket plan's order.
  /// Thread safety: `ready` from any threads, `apply` from the replica's.
  template <class Context, class O, class Entry>
  class ListStep {
    using P = typename Context::placement_type;
    using C = typename Context::communicator_type;
    using T = typename decltype(Entry::gradient)::element_type;
    static constexpr bool kFusible =
        P::kUpdateSite != placement::UpdateSite::servers && !communicator::kDeviceMemory<C>;
    // Variables the trainer owns: O is then the trainer's update, called once per step.
    static constexpr bool kAdopted =
        placement::kAdopted<std::remove_pointer_t<decltype(Entry::variable)>>;
    static_assert(!kAdopted || kFusible,
                  "strata: adopted variables live in host memory, outside parameter servers");

   public:
    ListStep(Context& context, const O& optimizer, std::span<const Entry> list)
        : context_(&context),
          optimizer_(optimizer),
          list_(list.begin(), list.end()),
          ready_(list.size()),
          group_(list.size(), -1),
          slot_(list.size(), 0) {
      const bool many = context.num_replicas_in_sync() > 1;
      std::array<std::vector<fusion::GradientRef>, 2> refs;
      for (std::size_t i = 0; i < list_.size(); ++i) {
        const Entry& entry = list_[i];
        detail::check_size(context, "apply_gradients", entry.gradient.size(),
                           entry.variable->size());
        if (!many) continue;
        const auto aggregation = entry.variable->aggregation();
        detail::require_aggregation(context, "apply_gradients", aggregation);
        if (!kFusible || aggregation == placement::VariableAggregation::only_first_replica)
          continue;
        const int group = aggregation == placement::VariableAggregation::sum ? 0 : 1;
        group_[i] = group;
        slot_[i] = refs[static_cast<std::size_t>(group)].size();
        refs[static_cast<std::size_t>(group)].push_back(fusion::gradient(entry.gradient));
      }
      fused_ = kFusible && many;
      if constexpr (kFusible) {
        for (std::size_t g = 0; g < 2; ++g) {
          left_[g] = refs[g].size();
          if (!refs[g].empty())
            buckets_[g] = &context.fused_buckets(g == 0 ? ReduceOp::sum : ReduceOp::mean, refs[g]);
        }
      }
    }

    ListStep(const ListStep&) = delete;
    ListStep& operator=(const ListStep&) = delete;

    /// Gradient `i` of the list holds this step's values: its bucket may start.
    /// @throws UsageError for an index out of range or a gradient ready twice; the collectives'
    ///   errors.
    void ready(std::size_t i) {
      std::lock_guard lock(mutex_);
      ready_.mark(i, context_->replica_id_in_sync_group());
      if constexpr (kFusible) {
        if (!fused_ || group_[i] < 0) return;
        const auto group = static_cast<std::size_t>(group_[i]);
        if (group == 1 && left_[0] > 0) {
          held_.push_back(i);  // averaged buckets start after every summed one
          return;
        }
        forward(i);
        if (group == 0 && left_[0] == 0) {
          for (const std::size_t held : held_)
            forward(held);
          held_.clear();
        }
      }
    }

    /// Waits for the step's collectives and updates every variable of the list.
    /// @throws UsageError naming a gradient that was never made ready; the collectives' errors.
    void apply() {
      ready_.require_all(context_->replica_id_in_sync_group());
      if constexpr (P::kUpdateSite == placement::UpdateSite::servers) {
        // Every variable's push in one batch of requests to the servers.
        detail::apply_on_servers(
            *context_, optimizer_, std::span<const Entry>(list_),
            [&](const auto& variable) { return server_sync(*context_, variable); });
        return;
      }
      if (!fused_) {
        if constexpr (kAdopted)
          update_adopted();  // one replica: nothing to aggregate
        else
          for (const Entry& entry : list_)
            Synchronous::apply_gradients(*context_, optimizer_, entry.gradient, *entry.variable);
        return;
      }
      if constexpr (kFusible) {
        for (auto* buckets : buckets_)
          if (buckets != nullptr) buckets->wait();
        auto& communicator = context_->communicator();
        if constexpr (P::kUpdateSite == placement::UpdateSite::every_replica) {
          for (const Entry& entry : list_)
            if (entry.variable->aggregation() == placement::VariableAggregation::only_first_replica)
              communicator.broadcast(entry.gradient, 0);
        } else if (buckets_[0] == nullptr && buckets_[1] == nullptr) {
          communicator.barrier();  // every replica has finished reading the old values
        }
        if constexpr (kAdopted)
          update_adopted();
        else
          for (const Entry& entry : list_)
            P::apply(*entry.variable, context_->local_replica_id(), optimizer_,
                     std::span<const T>(entry.gradient));
        // One copy that every replica reads: nobody reads it before every update is in.
        if (P::kUpdateSite == placement::UpdateSite::one_replica) communicator.barrier();
      }
    }

   private:
    // The trainer's update of its adopted variables, on the replicas that hold a copy.
    void update_adopted() {
      if (P::kUpdateSite == placement::UpdateSite::every_replica ||
          context_->local_replica_id() == 0)
        optimizer_();
    }

    void forward(std::size_t i) {
      const auto group = static_cast<std::size_t>(group_[i]);
      --left_[group];
      buckets_[group]->ready(slot_[i]);
    }

    Context* context_;
    O optimizer_;
    std::vector<Entry> list_;
    detail::StepReadiness ready_;
    std::vector<int> group_;         // 0: summed, 1: averaged, -1: not fused
    std::vector<std::size_t> slot_;  // index in its group's buckets
    std::array<fusion::GradientBuckets<C>*, 2> buckets_{};
    std::array<std::size_t, 2> left_{};  // gradients of each group not yet forwarded
    std::vector<std::size_t> held_;      // averaged gradients ready before the summed ones
    bool fused_ = false;
    std::mutex mutex_;
  };

  /// The list form of apply_gradients: a ListStep whose gradients are all ready at once.
  template <class Context, class O, class Entry>
  static void apply_gradients_list(Context& context, const O& optimizer,
                                   std::span<const Entry> list) {
    ListStep<Context, O, Entry> step(context, optimizer, list);
    for (std::size_t i = 0; i < list.size(); ++i)
      step.ready(i);
    step.apply();
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
    if (many) detail::require_aggregation(context, "assign", aggregation);
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
  // How a synchronous push meets the servers: aggregated with every replica's of the step.
  template <class Context, class Variable>
  static ps::SyncSpec server_sync(Context& context, const Variable& variable) {
    return detail::synchronous_server_sync(context, variable, 0, kName);
  }

  static ReduceOp reduce_op(placement::VariableAggregation aggregation) noexcept {
    return aggregation == placement::VariableAggregation::sum ? ReduceOp::sum : ReduceOp::mean;
  }
};

}  // namespace strata::sync
