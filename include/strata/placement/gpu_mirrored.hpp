// strata/placement/gpu_mirrored.hpp — a copy of every variable on every replica's GPU.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string_view>

#include <strata/placement/device_variable.hpp>
#include <strata/placement/gpu_replicas.hpp>
#include <strata/placement/placement.hpp>

namespace strata::placement {

/// tf.distribute's MirroredStrategy placement on GPUs: each replica owns a copy of every
/// variable, and its optimizer state, in its device's memory; gradients (device memory) are
/// all-reduced and every replica applies the same update to its copy with a CUDA kernel.
struct GpuMirrored : GpuReplicas {
  static constexpr std::string_view kName = "GpuMirrored";
  static constexpr int kMaxReplicas = std::numeric_limits<int>::max();
  static constexpr UpdateSite kUpdateSite = UpdateSite::every_replica;

  template <std::floating_point T>
  using variable_type = DeviceVariable<T>;

  /// A copy on each of `devices`, the local replicas' devices.
  template <std::floating_point T>
  static DeviceVariable<T> create(std::span<const int> devices, std::span<const T> initial,
                                  VariableAggregation aggregation) {
    return DeviceVariable<T>(devices, initial, aggregation);
  }
  template <std::floating_point T>
  static std::span<const T> read(const DeviceVariable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  template <std::floating_point T>
  static std::span<T> write_target(DeviceVariable<T>& variable, int local_replica) noexcept {
    return variable.copy(static_cast<std::size_t>(local_replica));
  }
  template <class O, std::floating_point T>
  static void apply(DeviceVariable<T>& variable, int local_replica, const O& optimizer,
                    std::span<const T> gradient) {
    variable.apply(static_cast<std::size_t>(local_replica), optimizer, gradient);
  }
};

}  // namespace strata::placement

#endif  // STRATA_HAS_CUDA
