// strata/placement/adopted_variable.hpp — a variable over storage the trainer owns.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/placement/variable.hpp>

namespace strata::placement {

/// A variable whose values live in buffers the trainer owns (its model's parameters, a
/// framework's tensors), adopted through `Strategy::adopt_variable`: one buffer per local
/// replica under placements with a copy per replica (Mirrored, MultiWorkerMirrored), one that
/// every replica reads otherwise (CentralStorage, OneDevice, Default).
///
/// The strategy aggregates the gradients of adopted variables as it does its own variables'
/// (`ReplicaContext::apply_gradients(update, list)`), and the trainer's own optimizer updates
/// the buffers: the same aggregation and synchronous equivalence, without strata's optimizers.
/// The variable holds no values and no optimizer state: the buffers must outlive it and stay
/// where they are (a framework that reallocates a parameter needs it adopted again).
template <std::floating_point T>
class AdoptedVariable {
 public:
  /// @throws UsageError when there is no buffer, the buffers' sizes differ or two of them
  /// overlap (two replicas would write one memory).
  AdoptedVariable(std::vector<std::span<T>> copies, VariableAggregation aggregation)
      : copies_(std::move(copies)), aggregation_(aggregation) {
    if (copies_.empty())
      throw UsageError(-1, "adopt_variable", "no buffer was given",
                       "pass the trainer's buffer of this variable (one per local replica)");
    for (std::size_t i = 1; i < copies_.size(); ++i)
      if (copies_[i].size() != copies_[0].size())
        throw UsageError(-1, "adopt_variable",
                         fmt::format("replica {}'s buffer has {} elements, replica 0's {}", i,
                                     copies_[i].size(), copies_[0].size()),
                         "pass buffers of one size, one per local replica");
    if (size() == 0) return;
    std::vector<T*> starts;
    for (std::span<T> copy : copies_)
      starts.push_back(copy.data());
    std::sort(starts.begin(), starts.end(), std::less<T*>{});
    for (std::size_t i = 1; i < starts.size(); ++i)
      if (!std::less<T*>{}(starts[i - 1] + (size() - 1), starts[i]))
        throw UsageError(-1, "adopt_variable", "two replicas' buffers overlap",
                         "give every local replica a buffer of its own (its own model copy)");
  }

  std::size_t size() const noexcept { return copies_.front().size(); }
  std::size_t num_copies() const noexcept { return copies_.size(); }
  VariableAggregation aggregation() const noexcept { return aggregation_; }

  /// The primary buffer (copy 0).
  std::span<const T> read() const noexcept { return copies_.front(); }

  /// Cross-replica assignment: sets every buffer. @throws UsageError on a size mismatch.
  void assign(std::span<const T> value) {
    detail::assign_every_copy(copies_, value, "AdoptedVariable");
  }

  /// Buffer `index` (0 ≤ index < num_copies()).
  std::span<T> copy(std::size_t index) const noexcept { return copies_[index]; }

  /// The buffer local replica `local_replica` reads and writes: its own, or the shared one.
  std::span<T> copy_of_replica(int local_replica) const noexcept {
    return copies_.size() == 1 ? copies_.front() : copies_[static_cast<std::size_t>(local_replica)];
  }

 private:
  std::vector<std::span<T>> copies_;
  VariableAggregation aggregation_;
};

/// Whether V is an AdoptedVariable.
template <class V>
inline constexpr bool kAdopted = false;
template <std::floating_point T>
inline constexpr bool kAdopted<AdoptedVariable<T>> = true;

}  // namespace strata::placement
