// strata/sync/sync.hpp — the Sync concept: when and how updates meet the variables.
#pragma once

#include <concepts>
#include <string_view>

namespace strata::sync {

/// S models Sync if:
///   1. `S::kName` (convertible to std::string_view) names it in messages;
///   2. `S::kWaitsForAllReplicas` (bool) says whether an update waits until every replica
///      has contributed its gradient: Mirrored copies stay identical only if it does, so a
///      strategy rejects a per-replica-copy placement with a sync that does not;
///   3. `S::apply_gradients(context, optimizer, gradient, variable)` and
///      `S::assign(context, variable, value)` are static function templates that decide when
///      and how gradients and values meet the variables for any `ReplicaContext` (checked where
///      a strategy uses them: they are templates over the context). They use only what the
///      Placement concept states (`kUpdateSite`, `apply`, `write_target`) and the context's
///      communicator, never which placement they got, so a new placement needs no new sync
///      policy and a new sync policy works with every placement.
/// Optionally, `S::apply_gradients_list(context, optimizer, entries)` and a class template
/// `S::ListStep<Context, O, Entry>` take the list form of apply_gradients (Synchronous fuses its
/// collectives); without them a context runs the one-variable form for each entry. A policy
/// that keeps something per replica from step to step names it `S::ReplicaState` (default
/// constructible; the strategy keeps one per replica, `context.sync_state()`), and one whose
/// updates do not wait for all replicas but that brings a per-replica placement's copies back
/// to equal values on its own schedule says so with `S::kAveragesCopies` (LocalSgd).
/// It leaves out the transport (the communicator's job) and the storage (the placement's).
template <class S>
concept Sync = requires {
  { S::kName } -> std::convertible_to<std::string_view>;
  { S::kWaitsForAllReplicas } -> std::convertible_to<bool>;
};

namespace detail {
struct NoReplicaState {};
template <class S>
struct ReplicaStateOf {
  using type = NoReplicaState;
};
template <class S>
requires requires {
  typename S::ReplicaState;
}
struct ReplicaStateOf<S> {
  using type = typename S::ReplicaState;
};
}  // namespace detail

/// What sync policy S keeps per replica from step to step: `S::ReplicaState`, or nothing.
template <class S>
using ReplicaState = typename detail::ReplicaStateOf<S>::type;

/// Whether S, whose updates need not wait for every replica, averages the copies of a
/// per-replica placement back to equal values itself (`S::kAveragesCopies`).
template <class S>
inline constexpr bool kAveragesCopies = [] {
  if constexpr (requires { S::kAveragesCopies; })
    return static_cast<bool>(S::kAveragesCopies);
  else
    return false;
}();

}  // namespace strata::sync
