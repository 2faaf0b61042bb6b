// strata/placement/placement.hpp — the Placement concept: where variables live and how a
// replica reads and updates them.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

#include <strata/core/enum_names.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/placement/variable.hpp>

namespace strata::placement {

/// Where a placement applies an update: what a sync policy must deliver to whom.
enum class UpdateSite : std::uint8_t {
  /// Every replica applies the update to a copy of its own, so every replica needs the
  /// aggregated gradient, and all must apply the same one to stay equal (Mirrored).
  every_replica,
  /// Replica 0 applies the update once, to storage every replica reads, so replica 0 needs the
  /// aggregated gradient and the others must not read until it has applied it (CentralStorage,
  /// OneDevice, Default).
  one_replica,
};

}  // namespace strata::placement

template <>
struct strata::EnumNames<strata::placement::UpdateSite> {
  static constexpr std::array<std::string_view, 2> kNames{"every_replica", "one_replica"};
};

namespace strata::placement {

namespace detail {

/// The members a placement has for variables of element type T.
template <class P, class T>
concept PlacesVariablesOf = requires(typename P::template variable_type<T>& variable,
                                     const typename P::template variable_type<T>& cvariable,
                                     int local_replicas, int local_replica,
                                     std::span<const T> values, VariableAggregation aggregation,
                                     const optim::Sgd& optimizer) {
  {
    P::template create<T>(local_replicas, values, aggregation)
    } -> std::same_as<typename P::template variable_type<T>>;
  { cvariable.size() } -> std::convertible_to<std::size_t>;
  { cvariable.aggregation() } -> std::same_as<VariableAggregation>;
  { cvariable.read() } -> std::convertible_to<std::span<const T>>;
  variable.assign(values);
  { P::read(cvariable, local_replica) } -> std::convertible_to<std::span<const T>>;
  { P::write_target(variable, local_replica) } -> std::convertible_to<std::span<T>>;
  P::apply(variable, local_replica, optimizer, values);
};

}  // namespace detail

/// P models Placement if:
///   1. `P::kName` (convertible to std::string_view) names it in messages;
///   2. `P::kMaxReplicas` (int) bounds the replicas it runs in one process: 1 for single-device
///      placements, so that a strategy can reject a communicator between replicas that would
///      never be used;
///   3. `P::kUpdateSite` (UpdateSite) says where an update is applied, which is all a sync
///      policy needs to know to deliver gradients: to every replica, or to replica 0 with the
///      others waiting;
///   4. for T = float and double, `P::variable_type<T>` is the variable it creates with
///      `P::create<T>(local_replicas, initial, aggregation)`: the placement owns where values
///      and optimizer slots live. A variable tells its `size()` and `aggregation()`, and outside
///      `Strategy::run` reads (`read()`) and sets (`assign(values)`) the model's value;
///   5. `P::read(variable, local_replica)` is what a replica reads,
///      `P::write_target(variable, local_replica)` the storage it writes when the variable is
///      assigned (empty when the replica writes none), and
///      `P::apply(variable, local_replica, optimizer, gradient)` applies the replica's part of
///      an update, given the gradient the sync policy aggregated.
/// It leaves out devices (a GPU placement maps replicas to CUDA devices) and when gradients
/// meet (the sync policy's), and how values cross processes (the communicator's).
template <class P>
concept Placement = requires {
  { P::kName } -> std::convertible_to<std::string_view>;
  { P::kMaxReplicas } -> std::convertible_to<int>;
  { P::kUpdateSite } -> std::convertible_to<UpdateSite>;
}
&&detail::PlacesVariablesOf<P, float>&& detail::PlacesVariablesOf<P, double>;

}  // namespace strata::placement
