// strata/placement/gpu_central_storage.hpp — one host copy of every variable, replicas on GPUs.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <concepts>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include <cuda_runtime_api.h>

#include <strata/optim/optimizer.hpp>
#include <strata/placement/gpu_replicas.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/cuda/status.hpp>

namespace strata::placement {

/// tf.distribute's CentralStorageStrategy on GPUs: every variable lives once, on the host, in
/// pinned memory that each replica's kernels read directly; the replicas' gradients are reduced
/// onto one GPU (ReduceToOneDevice), copied to the host, and the optimizer updates the host
/// copy once, on the CPU, as TF does.
struct GpuCentralStorage : GpuReplicas {
  static constexpr std::string_view kName = "GpuCentralStorage";
  static constexpr int kMaxReplicas = std::numeric_limits<int>::max();
  static constexpr UpdateSite kUpdateSite = UpdateSite::one_replica;

  template <std::floating_point T>
  using variable_type = Variable<T, transport::cuda::PinnedAllocator<T>>;

  template <std::floating_point T>
  static variable_type<T> create(std::span<const int> /*devices*/, std::span<const T> initial,
                                 VariableAggregation aggregation) {
    return variable_type<T>(1, initial, aggregation);
  }
  template <std::floating_point T>
  static std::span<const T> read(const variable_type<T>& variable, int /*local_replica*/) noexcept {
    return variable.copy(0);
  }
  template <std::floating_point T>
  static std::span<T> write_target(variable_type<T>& variable, int local_replica) noexcept {
    return local_replica == 0 ? variable.copy(0) : std::span<T>{};
  }
  /// Replica 0 copies the reduced gradient (on its device) to the host and applies the update.
  template <class O, std::floating_point T>
  static void apply(variable_type<T>& variable, int local_replica, const O& optimizer,
                    std::span<const T> gradient) {
    if (local_replica != 0) return;
    thread_local std::vector<T> host;  // kept between updates: no allocation per step
    host.resize(gradient.size());
    transport::cuda::check_cuda(
        cudaMemcpy(host.data(), gradient.data(), gradient.size_bytes(), cudaMemcpyDefault), 0,
        "apply_gradients", "cudaMemcpy of the reduced gradient to the host");
    optimizer.apply(variable.copy(0), std::span<const T>(host),
                    variable.optimizer_state(0, optimizer));
  }
};

}  // namespace strata::placement

#endif  // STRATA_HAS_CUDA
