// strata/placement/variable.hpp — distributed variables: storage that follows the placement.
#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <iterator>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/error.hpp>
#include <strata/fwd.hpp>
#include <strata/optim/optimizer.hpp>

namespace strata::placement {

/// How values written by several replicas to one variable are combined (tf.distribute's
/// `tf.VariableAggregation`). It governs `ReplicaContext::assign` and the gradients of
/// `ReplicaContext::apply_gradients`.
///   none                no aggregation: updating from several replicas is an error;
///   sum, mean           the replicas' values (or gradients) are summed / averaged;
///   only_first_replica  the value of replica 0 is taken, the others are ignored.
enum class VariableAggregation { none, sum, mean, only_first_replica };

}  // namespace strata::placement

template <>
struct strata::EnumNames<strata::placement::VariableAggregation> {
  static constexpr std::array<std::string_view, 4> kNames{"none", "sum", "mean",
                                                          "only_first_replica"};
};

namespace strata::placement {

using strata::to_string;

namespace detail {

// Cross-replica assignment of a variable's copies (buffers of one size, at least one).
template <class Copies, class T>
void assign_every_copy(Copies& copies, std::span<const T> value, std::string_view variable) {
  const std::size_t size = std::size(copies.front());
  if (value.size() != size)
    throw UsageError(-1, fmt::format("{}::assign", variable),
                     fmt::format("value has {} elements, the variable {}", value.size(), size),
                     "assign a value of the variable's size");
  for (auto& copy : copies)
    std::copy(value.begin(), value.end(), std::begin(copy));
}

}  // namespace detail

/// A variable created through a strategy: `num_copies()` buffers of `size()` elements, one per
/// replica under Mirrored, one shared by every replica otherwise, with the optimizer state
/// (slots) that belongs to each copy.
///
/// Replicas reach their copy through `ReplicaContext::read`, `assign` and `apply_gradients`;
/// outside `Strategy::run` (cross-replica context) `read()` gives the primary copy and
/// `assign()` sets every copy. Do not move a variable while `run` is in progress.
///
/// Trainable variables hold float or double (16-bit training keeps float master weights).
/// `Allocator` places the values: GpuCentralStorage keeps them in pinned host memory, which
/// kernels on every GPU read directly.
template <std::floating_point T, class Allocator>
class Variable {
 public:
  Variable(std::size_t num_copies, std::span<const T> initial, VariableAggregation aggregation)
      : copies_(num_copies, std::vector<T, Allocator>(initial.begin(), initial.end())),
        aggregation_(aggregation),
        states_(num_copies) {
    if (num_copies == 0)
      throw UsageError(-1, "Variable", "a variable needs at least one copy",
                       "create variables through a strategy (Strategy::create_variable)");
  }

  Variable(Variable&&) noexcept = default;
  Variable& operator=(Variable&&) noexcept = default;
  Variable(const Variable&) = delete;
  Variable& operator=(const Variable&) = delete;

  std::size_t size() const noexcept { return copies_.front().size(); }
  std::size_t num_copies() const noexcept { return copies_.size(); }
  VariableAggregation aggregation() const noexcept { return aggregation_; }

  /// The primary copy (copy 0). Under Mirrored every copy holds the same values after each
  /// synchronous update.
  std::span<const T> read() const noexcept { return copies_.front(); }

  /// Cross-replica assignment: sets every copy. @throws UsageError on a size mismatch.
  void assign(std::span<const T> value) { detail::assign_every_copy(copies_, value, "Variable"); }

  /// Copy `index` (0 ≤ index < num_copies()).
  std::span<T> copy(std::size_t index) noexcept { return copies_[index]; }
  std::span<const T> copy(std::size_t index) const noexcept { return copies_[index]; }

  /// The optimizer state of copy `index`, created on first use for `optimizer`. Each copy's
  /// state is touched only by the replica that owns the copy, so replicas need no lock.
  /// @throws UsageError when the copy was updated before by an optimizer with a different
  /// number of slots (one variable, one optimizer).
  template <optim::Optimizer<T> O>
  optim::OptimizerState<T>& optimizer_state(std::size_t index, const O& optimizer) {
    auto& entry = states_[index];
    if (!entry.created) {
      entry.state = optim::make_state<T>(optimizer, size());
      entry.slots_per_element = O::kSlots;
      entry.created = true;
    }
    if (entry.slots_per_element != O::kSlots)
      throw UsageError(-1, "apply_gradients",
                       fmt::format("this variable was updated by an optimizer with {} slots per "
                                   "element, now by one with {}",
                                   entry.slots_per_element, O::kSlots),
                       "update each variable with one optimizer");
    return entry.state;
  }

  /// The optimizer state of copy `index`, or nullptr before its first update. Checkpoints save
  /// it.
  const optim::OptimizerState<T>* optimizer_state(std::size_t index) const noexcept {
    const auto& entry = states_[index];
    return entry.created ? &entry.state : nullptr;
  }

  /// The arrays of `size()` elements the state of copy `index` holds (its optimizer's kSlots; 0
  /// before its first update): what a 0-element variable's state cannot tell by its size.
  std::size_t optimizer_slots_per_element(std::size_t index) const noexcept {
    return states_[index].slots_per_element;
  }

  /// Gives every copy `state`, which holds `slots_per_element` arrays of `size()` elements, or,
  /// given nullptr, no state (the next update starts from zeros). Checkpoints restore it; the
  /// next update checks `slots_per_element` against its optimizer's.
  /// @throws UsageError if the state's size is not `slots_per_element * size()`.
  void restore_optimizer_state(const optim::OptimizerState<T>* state,
                               std::size_t slots_per_element) {
    if (state != nullptr && state->slots.size() != slots_per_element * size())
      throw UsageError(-1, "Variable::restore_optimizer_state",
                       fmt::format("the state has {} slot values, not {} x {}", state->slots.size(),
                                   slots_per_element, size()),
                       "pass slots_per_element arrays of the variable's size");
    for (auto& entry : states_) {
      entry.created = state != nullptr;
      entry.state = state != nullptr ? *state : optim::OptimizerState<T>{};
      entry.slots_per_element = state != nullptr ? slots_per_element : 0;
    }
  }

 private:
  std::vector<std::vector<T, Allocator>> copies_;
  VariableAggregation aggregation_;
  struct OptimizerSlots {
    optim::OptimizerState<T> state;
    std::size_t slots_per_element = 0;
    bool created = false;
  };
  std::vector<OptimizerSlots> states_;
};

}  // namespace strata::placement
