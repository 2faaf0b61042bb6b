// strata/sync/detail/apply_on_servers.hpp — apply_gradients and assign where the servers update
// the variables: one variable's push, or the list form's every push in one batch of requests
// (where the placement batches them).
#pragma once

#include <span>
#include <type_traits>
#include <vector>

#include <strata/ps/protocol.hpp>
#include <strata/sync/detail/check_size.hpp>

namespace strata::sync::detail {

/// Pushes this replica's `gradient` of `variable` under `sync`, its size checked first.
template <class Context, class O, class Variable, class T>
void apply_one_on_servers(Context& context, const O& optimizer, std::span<T> gradient,
                          Variable& variable, const ps::SyncSpec& sync) {
  using P = typename Context::placement_type;
  check_size(context, "apply_gradients", gradient.size(), variable.size());
  P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient), sync);
}

/// Sets `variable` on the servers to this replica's `value` (the last writer wins).
template <class Context, class Variable, class T>
void assign_on_servers(Context& context, Variable& variable, std::span<const T> value) {
  using P = typename Context::placement_type;
  check_size(context, "assign", value.size(), variable.size());
  P::store(variable, context.local_replica_id(), value);
}

/// Pushes every entry's gradient (`entry.gradient`, `*entry.variable`) as the policy's
/// `sync_of(variable)` says, all sizes checked first.
template <class Context, class O, class Entry, class SyncOf>
void apply_on_servers(Context& context, const O& optimizer, std::span<const Entry> list,
                      SyncOf sync_of) {
  using P = typename Context::placement_type;
  using T = typename decltype(Entry::gradient)::element_type;
  using Variable = std::remove_pointer_t<decltype(Entry::variable)>;
  std::vector<Variable*> variables;
  std::vector<std::span<const T>> gradients;
  std::vector<ps::SyncSpec> syncs;
  for (const Entry& entry : list) {
    check_size(context, "apply_gradients", entry.gradient.size(), entry.variable->size());
    variables.push_back(entry.variable);
    gradients.push_back(std::span<const T>(entry.gradient));
    syncs.push_back(sync_of(*entry.variable));
  }
  const int lane = context.local_replica_id();
  if constexpr (requires {
                  P::apply_all(lane, optimizer, std::span<Variable* const>(variables),
                               std::span<const std::span<const T>>(gradients),
                               std::span<const ps::SyncSpec>(syncs));
                }) {
    P::apply_all(lane, optimizer, std::span<Variable* const>(variables),
                 std::span<const std::span<const T>>(gradients),
                 std::span<const ps::SyncSpec>(syncs));
  } else {
    for (std::size_t i = 0; i < variables.size(); ++i)
      P::apply(*variables[i], lane, optimizer, gradients[i], syncs[i]);
  }
}

}  // namespace strata::sync::detail
