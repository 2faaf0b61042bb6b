// strata/sync/asynchronous.hpp — every replica's gradient reaches the variables on its own.
#pragma once

#include <span>
#include <string_view>

#include <strata/placement/placement.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/sync/detail/apply_on_servers.hpp>
#include <strata/sync/detail/check_size.hpp>

namespace strata::sync {

/// Asynchronous training (TF's parameter-server default): each replica pushes its own gradient,
/// which the servers apply at once, and goes on with the values that come back; no replica
/// waits for another. Gradients are applied as each replica computed them, not aggregated: the
/// variable's VariableAggregation does not apply (as in TF). Replicas compute on values up to
/// a few updates old, so training differs from single-replica training; it still converges
/// where the learning rate tolerates the staleness.
///
/// Needs a placement whose storage takes every replica's update on its own
/// (UpdateSite::servers): copies per replica would drift apart, and one copy shared in the
/// process would be written while other replicas read it.
struct Asynchronous {
  static constexpr std::string_view kName = "Asynchronous";
  static constexpr bool kWaitsForAllReplicas = false;

  /// Applies this replica's `gradient` to `variable` through the servers, and refreshes the
  /// replica's copy with the values after it.
  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    using P = typename Context::placement_type;
    require_servers<P>();
    detail::check_size(context, "apply_gradients", gradient.size(), variable.size());
    P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient));
  }

  /// The list form: every variable's gradient pushed in one batch of requests to the servers.
  template <class Context, class O, class Entry>
  static void apply_gradients_list(Context& context, const O& optimizer,
                                   std::span<const Entry> list) {
    using P = typename Context::placement_type;
    require_servers<P>();
    detail::apply_on_servers(context, optimizer, list,
                             [](const auto& /*variable*/) { return ps::SyncSpec{}; });
  }

  /// Sets `variable` to this replica's `value` on the servers (the last writer wins).
  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    using P = typename Context::placement_type;
    require_servers<P>();
    detail::assign_on_servers(context, variable, value);
  }

 private:
  template <class P>
  static constexpr void require_servers() {
    static_assert(P::kUpdateSite == placement::UpdateSite::servers,
                  "strata::sync::Asynchronous: replicas update on their own only where servers "
                  "apply each update atomically; use a ParameterServer placement, or "
                  "Synchronous with this one.");
  }
};

}  // namespace strata::sync
