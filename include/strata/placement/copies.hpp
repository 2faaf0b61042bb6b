// strata/placement/copies.hpp — the two storage schemes of the in-process placements: a copy
// of every variable per replica, or one copy all replicas share.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>

#include <strata/optim/optimizer.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>

namespace strata::placement {

/// Every replica owns a full copy of each variable and applies every update to it itself
/// (Mirrored): the copies stay equal because every replica applies the same aggregated
/// gradient with the same arithmetic.
struct CopyPerReplica {
  static constexpr UpdateSite kUpdateSite = UpdateSite::every_replica;

  template <std::floating_point T>
  using variable_type = Variable<T>;

  template <std::floating_point T>
  static Variable<T> create(int local_replicas, std::span<const T> initial,
                            VariableAggregation aggregation) {
    return Variable<T>(static_cast<std::size_t>(local_replicas), initial, aggregation);
  }
  template <std::floating_point T>
  static std::span<const T> read(const Variable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  template <std::floating_point T>
  static std::span<T> write_target(Variable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  template <class O, std::floating_point T>
  static void apply(Variable<T>& variable, int local_replica, const O& optimizer,
                    std::span<const T> gradient) {
    const auto copy = static_cast<std::size_t>(local_replica);
    optimizer.apply(variable.copy(copy), gradient, variable.optimizer_state(copy, optimizer));
  }
};

/// One copy of each variable that every replica reads; replica 0 applies each update once
/// (CentralStorage, OneDevice, Default).
struct SharedCopy {
  static constexpr UpdateSite kUpdateSite = UpdateSite::one_replica;

  template <std::floating_point T>
  using variable_type = Variable<T>;

  template <std::floating_point T>
  static Variable<T> create(int /*local_replicas*/, std::span<const T> initial,
                            VariableAggregation aggregation) {
    return Variable<T>(1, initial, aggregation);
  }
  template <std::floating_point T>
  static std::span<const T> read(const Variable<T>& variable, int /*local_replica*/) noexcept {
    return variable.copy(0);
  }
  template <std::floating_point T>
  static std::span<T> write_target(Variable<T>& variable, int local_replica) noexcept {
    return local_replica == 0 ? variable.copy(0) : std::span<T>{};
  }
  template <class O, std::floating_point T>
  static void apply(Variable<T>& variable, int local_replica, const O& optimizer,
                    std::span<const T> gradient) {
    if (local_replica == 0)
      optimizer.apply(variable.copy(0), gradient, variable.optimizer_state(0, optimizer));
  }
};

}  // namespace strata::placement
