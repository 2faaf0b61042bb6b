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
/// collectives); without them a context runs the one-variable form for each entry.
/// It leaves out the transport (the communicator's job) and the storage (the placement's).
template <class S>
concept Sync = requires {
  { S::kName } -> std::convertible_to<std::string_view>;
  { S::kWaitsForAllReplicas } -> std::convertible_to<bool>;
};

}  // namespace strata::sync
