// strata/placement/placement.hpp — the Placement concept: where variables live and how a
// replica reads and updates them.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

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
  /// Parameter servers hold the variables and apply each replica's update on its own,
  /// atomically; each replica reads a copy it refreshes with every update it makes
  /// (ParameterServer). Nothing needs to be aggregated first.
  servers,
};

}  // namespace strata::placement

template <>
struct strata::EnumNames<strata::placement::UpdateSite> {
  static constexpr std::array<std::string_view, 3> kNames{"every_replica", "one_replica",
                                                          "servers"};
};

namespace strata::placement {

/// Whether placement P keeps values in memory a GPU reaches (P::kDeviceMemory).
template <class P>
inline constexpr bool kOnDevice = [] {
  if constexpr (requires { P::kDeviceMemory; })
    return static_cast<bool>(P::kDeviceMemory);
  else
    return false;
}();

/// Whether placement P keeps its variables with servers it holds a session with
/// (P::session_type, which the strategy opens with `P::open_session`).
template <class P>
concept HasSession = requires {
  typename P::session_type;
};

namespace detail {
template <class P>
struct ReplicaPlacesOf {
  using type = std::conditional_t<kOnDevice<P>, std::span<const int>, int>;
};
template <HasSession P>
struct ReplicaPlacesOf<P> {
  using type = typename P::session_type&;
};
template <class P>
struct SessionHolderOf {
  using type = int;
};
template <HasSession P>
struct SessionHolderOf<P> {
  using type = std::unique_ptr<typename P::session_type>;
};
}  // namespace detail

/// What a strategy over placement P holds: its session, or an unused int where P has none.
template <class P>
using SessionHolder = typename detail::SessionHolderOf<P>::type;

/// What a placement's `create` is given to place the copies of a variable: the number of local
/// replicas, for a GPU placement the CUDA device of each local replica (which the strategy's
/// communicators chose), or for a placement with a session that session.
template <class P>
using ReplicaPlaces = typename detail::ReplicaPlacesOf<P>::type;

namespace detail {

/// The members a placement has for variables of element type T.
template <class P, class T>
concept PlacesVariablesOf = requires(typename P::template variable_type<T>& variable,
                                     const typename P::template variable_type<T>& cvariable,
                                     ReplicaPlaces<P> replicas, int local_replica,
                                     std::span<const T> values, VariableAggregation aggregation,
                                     const optim::Sgd& optimizer) {
  {
    P::template create<T>(replicas, values, aggregation)
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
///      `P::create<T>(places, initial, aggregation)`, places being ReplicaPlaces<P> (the local
///      replicas, or each one's CUDA device): the placement owns where values
///      and optimizer slots live. A variable tells its `size()` and `aggregation()`, and outside
///      `Strategy::run` reads (`read()`) and sets (`assign(values)`) the model's value;
///   5. `P::read(variable, local_replica)` is what a replica reads,
///      `P::write_target(variable, local_replica)` the storage it writes when the variable is
///      assigned (empty when the replica writes none), and
///      `P::apply(variable, local_replica, optimizer, gradient)` applies the replica's part of
///      an update, given the gradient the sync policy aggregated.
/// A placement may also have (GPU placements do, placement/gpu_replicas.hpp):
///   - `P::kDeviceMemory` (bool): its values and the replicas' buffers are memory a GPU
///     reaches, so the communicator must take device buffers (`C::kDeviceMemory`, with a
///     `device()` per rank);
///   - `P::default_replicas()`: the replicas of a process when none were asked for;
///   - `P::replica_scope(device)`: an object that, while it lives on a replica's thread, binds
///     the thread to the replica's CUDA device (which its communicator's `device()` names);
///   - `P::copy_values(from, to)`: how a replica's value is copied into a variable.
/// A placement whose variables live on servers (UpdateSite::servers) has:
///   - `P::session_type`, opened by the strategy with `P::open_session(cluster, local_replicas,
///     timeout)` and handed to `create` (the strategy then runs the replicas the cluster says,
///     STRATA_LOCAL_REPLICAS or 1, unless told);
///   - `P::store(variable, local_replica, values)`: a replica's assignment, sent to the servers.
/// It leaves out when gradients meet (the sync policy's) and how values cross processes (the
/// communicator's).
template <class P>
concept Placement = requires {
  { P::kName } -> std::convertible_to<std::string_view>;
  { P::kMaxReplicas } -> std::convertible_to<int>;
  { P::kUpdateSite } -> std::convertible_to<UpdateSite>;
}
&&detail::PlacesVariablesOf<P, float>&& detail::PlacesVariablesOf<P, double>;

/// Copies a replica's value into a variable's storage as placement P does it.
template <class P, class T>
void copy_values(std::span<const T> from, std::span<T> to) {
  if constexpr (requires { P::copy_values(from, to); })
    P::copy_values(from, to);
  else
    std::copy(from.begin(), from.end(), to.begin());
}

}  // namespace strata::placement
