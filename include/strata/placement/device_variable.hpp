// strata/placement/device_variable.hpp — a variable with a copy in the memory of each
// replica's GPU, and its optimizer state next to it.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/placement/variable.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/cuda/kernels.hpp>
#include <strata/transport/cuda/status.hpp>

namespace strata::placement {

namespace detail {

template <class O, class T>
concept RunsOnDevices = requires(const O& optimizer, std::int64_t step) {
  optimizer.template visit_rule<T>(step, [](const auto& /*rule*/) {});
};

}  // namespace detail

/// A variable created through a GPU strategy: one copy of `size()` elements in the memory of
/// each replica's device, and the optimizer state of each copy on the same device. Replicas
/// reach their copy through ReplicaContext::read and apply_gradients; outside Strategy::run,
/// `read()` copies the primary copy to the host and `assign()` sets every copy from the host.
///
/// Updates run on the device, on its legacy default stream, with the optimizer's own
/// per-element rule (optim/rules.hpp), so a copy on a GPU takes the same values as a host copy
/// updated with the same gradients.
template <std::floating_point T>
class DeviceVariable {
 public:
  /// One copy on each of `devices`, all set to `initial` (host memory).
  DeviceVariable(std::span<const int> devices, std::span<const T> initial,
                 VariableAggregation aggregation)
      : aggregation_(aggregation), size_(initial.size()) {
    if (devices.empty())
      throw UsageError(-1, "DeviceVariable", "a variable needs at least one copy",
                       "create variables through a strategy (Strategy::create_variable)");
    for (const int device : devices) {
      transport::cuda::DeviceScope scope(device, -1, "create_variable");
      Copy copy;
      copy.device = device;
      copy.values = transport::cuda::DeviceBuffer<T>(size_, -1, "create_variable");
      copy.values.copy_from(initial);
      copies_.push_back(std::move(copy));
    }
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t num_copies() const noexcept { return copies_.size(); }
  VariableAggregation aggregation() const noexcept { return aggregation_; }

  /// The values of the primary copy (copy 0), copied to the host once the work queued before
  /// on its device's default stream has finished.
  std::vector<T> read() const {
    std::vector<T> values(size_);
    transport::cuda::DeviceScope scope(copies_.front().device, -1, "Variable::read");
    copies_.front().values.copy_to(std::span(values));
    return values;
  }

  /// Cross-replica assignment from host memory: sets every copy.
  /// @throws UsageError on a size mismatch.
  void assign(std::span<const T> value) {
    if (value.size() != size_)
      throw UsageError(-1, "Variable::assign",
                       fmt::format("value has {} elements, the variable {}", value.size(), size_),
                       "assign a value of the variable's size");
    for (auto& copy : copies_) {
      transport::cuda::DeviceScope scope(copy.device, -1, "Variable::assign");
      copy.values.copy_from(value);
    }
  }

  /// Copy `index` (0 ≤ index < num_copies()), in the memory of device(index).
  std::span<T> copy(std::size_t index) noexcept { return copies_[index].values.span(); }
  std::span<const T> copy(std::size_t index) const noexcept { return copies_[index].values.span(); }
  /// The CUDA device that holds copy `index`.
  int device(std::size_t index) const noexcept { return copies_[index].device; }

  /// Applies `optimizer` to copy `index` with `gradient` (device memory of that copy's device),
  /// on the device's default stream. Each copy's state is touched only by the replica that
  /// owns it. @throws UsageError when the copy was updated before by an optimizer with a
  /// different number of slots, or for an invalid hyperparameter.
  template <class O>
  void apply(std::size_t index, const O& optimizer, std::span<const T> gradient) {
    static_assert(detail::RunsOnDevices<O, T>,
                  "strata: a GPU placement runs the optimizer's per-element rule in a CUDA "
                  "kernel, so the optimizer needs visit_rule<T>(step, f) (optim/rules.hpp), as "
                  "strata::optim::Sgd, Momentum and Adam have");
    Copy& copy = copies_[index];
    transport::cuda::DeviceScope scope(copy.device, -1, "apply_gradients");
    optimizer.template visit_rule<T>(copy.step, [&](const auto& rule) {
      constexpr std::size_t kSlots = std::remove_cvref_t<decltype(rule)>::kSlots;
      if (!copy.state_created) {
        copy.slots = transport::cuda::DeviceBuffer<T>(kSlots * size_, -1, "apply_gradients");
        transport::cuda::check_cuda(cudaMemset(copy.slots.data(), 0, copy.slots.size() * sizeof(T)),
                                    -1, "apply_gradients", "cudaMemset of the optimizer's slots");
        copy.slots_per_element = kSlots;
        copy.state_created = true;
      }
      if (copy.slots_per_element != kSlots)
        throw UsageError(-1, "apply_gradients",
                         fmt::format("this variable was updated by an optimizer with {} slots "
                                     "per element, now by one with {}",
                                     copy.slots_per_element, kSlots),
                         "update each variable with one optimizer");
      transport::cuda::check_cuda(
          transport::cuda::kernels::apply_rule(rule, copy.values.data(), gradient.data(),
                                               copy.slots.data(), size_, nullptr),
          -1, "apply_gradients", "the optimizer's kernel");
    });
    ++copy.step;
  }

  /// The primary copy's optimizer state, copied to the host for a checkpoint: its slots per
  /// element, or nothing before the first update. Every copy has the same state (the replicas
  /// apply the same reduced gradients).
  std::optional<std::size_t> read_optimizer_state(optim::OptimizerState<T>& into) const {
    const Copy& primary = copies_.front();
    if (!primary.state_created) return std::nullopt;
    into.slots.resize(primary.slots.size());
    into.step = primary.step;
    if (!into.slots.empty()) {
      transport::cuda::DeviceScope scope(primary.device, -1, "Variable::read_optimizer_state");
      primary.slots.copy_to(std::span(into.slots));
    }
    return primary.slots_per_element;
  }

  /// Whether `restore_optimizer_state` takes a state with `step` (any slot count: the next
  /// update checks it against its optimizer's).
  bool accepts_optimizer_state(std::size_t /*slots_per_element*/,
                               std::int64_t step) const noexcept {
    return step >= 0;
  }

  /// Gives every copy `state` (`slots_per_element` arrays of `size()` elements, host memory) or,
  /// for nullptr, no state, as Variable::restore_optimizer_state does.
  /// @throws UsageError if the state's size is not `slots_per_element * size()`.
  void restore_optimizer_state(const optim::OptimizerState<T>* state,
                               std::size_t slots_per_element) {
    if (state != nullptr && state->slots.size() != slots_per_element * size_)
      throw UsageError(-1, "Variable::restore_optimizer_state",
                       fmt::format("the state has {} values, not {} slots of {} elements",
                                   state->slots.size(), slots_per_element, size_),
                       "pass slots_per_element arrays of the variable's size");
    for (auto& copy : copies_) {
      transport::cuda::DeviceScope scope(copy.device, -1, "Variable::restore_optimizer_state");
      copy.slots = {};
      copy.state_created = state != nullptr;
      copy.slots_per_element = state != nullptr ? slots_per_element : 0;
      copy.step = state != nullptr ? state->step : 0;
      if (state == nullptr || state->slots.empty()) continue;
      copy.slots =
          transport::cuda::DeviceBuffer<T>(state->slots.size(), -1, "restore_optimizer_state");
      copy.slots.copy_from(std::span<const T>(state->slots));
    }
  }

 private:
  struct Copy {
    int device = 0;
    transport::cuda::DeviceBuffer<T> values;
    transport::cuda::DeviceBuffer<T> slots;
    std::size_t slots_per_element = 0;
    bool state_created = false;
    std::int64_t step = 0;
  };
  VariableAggregation aggregation_;
  std::size_t size_;
  std::vector<Copy> copies_;
};

}  // namespace strata::placement

#endif  // STRATA_HAS_CUDA
