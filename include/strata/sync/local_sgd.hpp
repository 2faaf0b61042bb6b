// strata/sync/local_sgd.hpp — each replica steps on its own gradients, and the copies are
// averaged every few steps (local SGD, periodic model averaging).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <strata/communicator/replica_group.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/fusion/gradient_ref.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>
#include <strata/sync/detail/check_size.hpp>
#include <strata/sync/synchronous.hpp>

namespace strata::sync {

/// Local SGD (Lin et al., 2018; Stich, 2018; PyTorch's PeriodicModelAverager): every replica
/// applies its own gradient to its own copy of each variable, with no communication, and every
/// `kPeriod` updates of a variable the replicas average their copies (an all-reduce of the
/// values instead of one of the gradients every step: kPeriod times fewer collectives, at the
/// cost of copies that drift apart between averagings). `LocalSgd<1>` with plain SGD computes
/// what Synchronous does with averaged gradients, up to rounding.
///
/// Needs a placement with a copy per replica (Mirrored, GpuMirrored). Optimizer slots stay each
/// replica's own. Updates are counted per variable and per replica, from the strategy's
/// creation: every replica must update a variable as many times as the others (as under
/// Synchronous). By the variable's aggregation: a `mean` gradient is each replica's estimate of
/// the whole gradient, and a `sum` one its share of it, which the replica scales by the number
/// of replicas before its step (in place, on host memory; a GPU placement takes `mean` ones);
/// both kinds of copies are averaged. `only_first_replica` copies take replica 0's, and `none`
/// is refused with more than one replica. Between averagings the copies differ: read the values
/// (a checkpoint, the cross-replica `Variable::read`) right after a step that averaged, or
/// average them with `average_now`.
template <int kPeriod>
struct LocalSgd {
  static_assert(kPeriod >= 1, "strata::sync::LocalSgd: the period is a number of updates >= 1");
  static constexpr std::string_view kName = "LocalSgd";
  static constexpr bool kWaitsForAllReplicas = false;
  static constexpr bool kAveragesCopies = true;
  static constexpr int kAveragingPeriod = kPeriod;

  /// Each variable's updates by this replica, by its address.
  struct ReplicaState {
    std::unordered_map<const void*, std::uint64_t> updates;
  };

  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    require_copies<Context>();
    sync::detail::check_size(context, "apply_gradients", gradient.size(), variable.size());
    check_aggregation(context, variable.aggregation());
    scale_share(context, gradient, variable.aggregation());
    using P = typename Context::placement_type;
    P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient));
    if (count_update(context, variable)) average_now(context, variable);
  }

  /// The list form: every variable updated, then those due averaged together, fused into
  /// buckets on host memory.
  template <class Context, class O, class Entry>
  static void apply_gradients_list(Context& context, const O& optimizer,
                                   std::span<const Entry> list) {
    require_copies<Context>();
    using P = typename Context::placement_type;
    using T = typename decltype(Entry::gradient)::element_type;
    const bool many = context.num_replicas_in_sync() > 1;
    // Every entry checked before any is applied: a refused list changes no variable.
    for (const Entry& entry : list) {
      sync::detail::check_size(context, "apply_gradients", entry.gradient.size(),
                               entry.variable->size());
      check_aggregation(context, entry.variable->aggregation());
    }
    std::vector<fusion::GradientRef> averaged;
    for (const Entry& entry : list) {
      scale_share(context, entry.gradient, entry.variable->aggregation());
      P::apply(*entry.variable, context.local_replica_id(), optimizer,
               std::span<const T>(entry.gradient));
      if (!count_update(context, *entry.variable) || !many) continue;
      // Fused buckets live in host memory: on a GPU each variable is averaged on its own.
      if constexpr (!kOnDevice<Context>) {
        if (entry.variable->aggregation() != placement::VariableAggregation::only_first_replica) {
          averaged.push_back(
              fusion::gradient(P::write_target(*entry.variable, context.local_replica_id())));
          continue;
        }
      }
      average_now(context, *entry.variable);
    }
    if constexpr (!kOnDevice<Context>)
      if (!averaged.empty()) context.all_reduce_fused(ReduceOp::mean, averaged);
  }

  /// Sets `variable` to the aggregation of every replica's `value`, as Synchronous does: the
  /// copies are equal afterwards.
  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    require_copies<Context>();
    Synchronous::assign(context, variable, value);
  }

  /// Averages this replica's copy of `variable` with the others' now (every replica calls it),
  /// outside the schedule: before reading or saving the values mid-period.
  template <class Context, class Variable>
  static void average_now(Context& context, Variable& variable) {
    require_copies<Context>();
    if (context.num_replicas_in_sync() == 1) return;
    using P = typename Context::placement_type;
    const auto copy = P::write_target(variable, context.local_replica_id());
    if (variable.aggregation() == placement::VariableAggregation::only_first_replica)
      context.communicator().broadcast(copy, 0);
    else
      context.communicator().all_reduce(copy, ReduceOp::mean);
  }

 private:
  template <class Context>
  static constexpr void require_copies() {
    static_assert(Context::placement_type::kUpdateSite == placement::UpdateSite::every_replica,
                  "strata::sync::LocalSgd: each replica steps its own copy of the variables "
                  "between averagings; use a placement with a copy per replica (Mirrored).");
  }

  template <class Context>
  static constexpr bool kOnDevice =
      communicator::kDeviceMemory<typename Context::communicator_type>;

  /// @throws UsageError for an aggregation LocalSgd cannot give several replicas.
  template <class Context>
  static void check_aggregation(Context& context, placement::VariableAggregation aggregation) {
    if (context.num_replicas_in_sync() == 1) return;
    sync::detail::require_aggregation(context, "apply_gradients", aggregation);
    if (kOnDevice<Context> && aggregation == placement::VariableAggregation::sum)
      throw UsageError(context.replica_id_in_sync_group(), "apply_gradients",
                       "LocalSgd on device memory takes mean gradients, and this variable "
                       "sums them",
                       "create the variable with VariableAggregation::mean and pass each "
                       "replica's mean gradient");
  }

  /// A `sum` gradient is this replica's share of the whole: times the replicas, it estimates
  /// the whole, as a `mean` one does (check_aggregation keeps device memory out).
  template <class Context, class T>
  static void scale_share(Context& context, std::span<T> gradient,
                          placement::VariableAggregation aggregation) {
    const int replicas = context.num_replicas_in_sync();
    if (aggregation != placement::VariableAggregation::sum || replicas == 1) return;
    if constexpr (!kOnDevice<Context>)
      for (T& value : gradient)
        value *= static_cast<T>(replicas);
  }

  /// Counts an update of `variable` by this replica; true when it completes a period.
  template <class Context, class Variable>
  static bool count_update(Context& context, const Variable& variable) {
    std::uint64_t& updates = context.sync_state().updates[&variable];
    return ++updates % static_cast<std::uint64_t>(kPeriod) == 0;
  }
};

}  // namespace strata::sync
