// strata/sync/bounded_staleness.hpp — asynchronous, but no replica runs far ahead of the
// slowest (stale synchronous parallel).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <strata/placement/placement.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/sync/detail/apply_on_servers.hpp>

namespace strata::sync {

/// Stale synchronous parallel training (Ho et al., 2013) over parameter servers: each
/// replica's gradient is applied as it arrives, as under Asynchronous, but a replica goes on to
/// its next step only once every replica has pushed the gradient of the step `kStaleness` steps
/// behind its own: no replica computes more than `kStaleness` steps ahead of the slowest.
/// `BoundedStaleness<0>` is bulk synchronous: every replica computes each step on values that
/// hold every replica's gradients of the step before (applied one by one, not averaged).
///
/// Steps are counted per variable, by the pushes of its gradients. A worker that has finished
/// (its strategy is gone) holds nobody back. A replica that stops pushing holds the others back
/// until their deadline (TimeoutError naming the ps task).
template <int kStaleness>
struct BoundedStaleness {
  static_assert(kStaleness >= 0, "strata::sync::BoundedStaleness: the bound is a step count >= 0");
  static constexpr std::string_view kName = "BoundedStaleness";
  static constexpr bool kWaitsForAllReplicas = false;
  static constexpr int kBound = kStaleness;

  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    using P = typename Context::placement_type;
    static_assert(P::kUpdateSite == placement::UpdateSite::servers,
                  "strata::sync::BoundedStaleness: the parameter servers enforce the bound; use a "
                  "ParameterServer placement.");
    detail::apply_one_on_servers(context, optimizer, gradient, variable, sync_of(context));
  }

  /// The list form: every variable's gradient pushed in one batch of requests to the servers.
  template <class Context, class O, class Entry>
  static void apply_gradients_list(Context& context, const O& optimizer,
                                   std::span<const Entry> list) {
    using P = typename Context::placement_type;
    static_assert(P::kUpdateSite == placement::UpdateSite::servers,
                  "strata::sync::BoundedStaleness: the parameter servers enforce the bound; use a "
                  "ParameterServer placement.");
    const ps::SyncSpec sync = sync_of(context);
    detail::apply_on_servers(context, optimizer, list,
                             [&](const auto& /*variable*/) { return sync; });
  }

  /// Sets `variable` to this replica's `value` on the servers (the last writer wins).
  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    detail::assign_on_servers(context, variable, value);
  }

 private:
  template <class Context>
  static ps::SyncSpec sync_of(const Context& context) {
    ps::SyncSpec sync;
    sync.mode = ps::SyncSpec::Mode::bounded_staleness;
    sync.replica = static_cast<std::uint32_t>(context.replica_id_in_sync_group());
    sync.replicas = static_cast<std::uint32_t>(context.num_replicas_in_sync());
    sync.bound = static_cast<std::uint32_t>(kStaleness);
    return sync;
  }
};

}  // namespace strata::sync
