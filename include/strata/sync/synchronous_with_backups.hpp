// strata/sync/synchronous_with_backups.hpp — synchronous training over parameter servers that
// does not wait for the slowest replicas (TF1's SyncReplicasOptimizer with backup workers).
#pragma once

#include <span>
#include <string_view>

#include <strata/placement/placement.hpp>
#include <strata/sync/detail/apply_on_servers.hpp>
#include <strata/sync/detail/server_sync.hpp>

namespace strata::sync {

/// Synchronous training with `kBackups` backup replicas (Chen et al., 2016; TF1's
/// SyncReplicasOptimizer with replicas_to_aggregate = replicas − kBackups): each step the
/// parameter servers average (or add, by the variable's aggregation) the first
/// `replicas − kBackups` gradients that arrive, apply them once, and answer those replicas; the
/// gradients of the step that come later are dropped, and their replicas go on at once with the
/// new values. A straggler costs the others nothing as long as no more than `kBackups` replicas
/// are late. `SynchronousWithBackups<0>` waits for every replica, as Synchronous does.
///
/// One apply_gradients is one step for every variable it names: its pushes all name the oldest
/// step the replica knows of them, so the variables move on together, as under TF1's one
/// global step. Give every step's variables to one apply_gradients (the list form), as a
/// trainer does, and create them all before the first step: every worker names the same
/// variables in every step (a variable created later holds the others back until it catches up).
template <int kBackups>
struct SynchronousWithBackups {
  static_assert(kBackups >= 0,
                "strata::sync::SynchronousWithBackups: the backups are a replica count >= 0");
  static constexpr std::string_view kName = "SynchronousWithBackups";
  static constexpr bool kWaitsForAllReplicas = kBackups == 0;
  static constexpr int kBackupReplicas = kBackups;

  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    using P = typename Context::placement_type;
    static_assert(P::kUpdateSite == placement::UpdateSite::servers,
                  "strata::sync::SynchronousWithBackups: the parameter servers aggregate the "
                  "first gradients of a step; use a ParameterServer placement (or Synchronous).");
    detail::apply_one_on_servers(
        context, optimizer, gradient, variable,
        detail::synchronous_server_sync(context, variable, kBackups, kName));
  }

  /// The list form: every variable's gradient pushed in one batch of requests, as one step.
  template <class Context, class O, class Entry>
  static void apply_gradients_list(Context& context, const O& optimizer,
                                   std::span<const Entry> list) {
    using P = typename Context::placement_type;
    static_assert(P::kUpdateSite == placement::UpdateSite::servers,
                  "strata::sync::SynchronousWithBackups: the parameter servers aggregate the "
                  "first gradients of a step; use a ParameterServer placement (or Synchronous).");
    detail::apply_on_servers(context, optimizer, list, [&](const auto& variable) {
      return detail::synchronous_server_sync(context, variable, kBackups, kName);
    });
  }

  /// Sets `variable` to this replica's `value` on the servers (the last writer wins).
  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    detail::assign_on_servers(context, variable, value);
  }
};

}  // namespace strata::sync
