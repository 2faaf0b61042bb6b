// strata/placement/gpu_replicas.hpp — what every GPU placement shares: replicas mapped to
// CUDA devices, and values copied wherever they live.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <span>

#include <cuda_runtime_api.h>

#include <strata/core/error.hpp>
#include <strata/transport/cuda/device.hpp>
#include <strata/transport/cuda/status.hpp>

namespace strata::placement {

/// What the GPU placements share: a replica runs on the CUDA device its communicator chose (by
/// default a process runs one replica per visible device, tf.distribute's MirroredStrategy on
/// every GPU), and values are copied wherever they live.
struct GpuReplicas {
  /// The placement's values live in memory a GPU reaches; the strategy requires a
  /// communicator whose buffers may be device memory.
  static constexpr bool kDeviceMemory = true;

  /// Replicas when StrategyOptions::num_replicas is 0: one per visible CUDA device.
  static int default_replicas() {
    transport::cuda::replica_device(0, "Strategy");  // throws when there is none
    return transport::cuda::device_count();
  }

  /// Makes `device`, a replica's, current on the replica's thread while the replica function
  /// runs: kernels it launches go to that device.
  static transport::cuda::DeviceScope replica_scope(int device) {
    return transport::cuda::DeviceScope(device, -1, "Strategy::run");
  }

  /// Copies values between any memories a GPU reaches (device or pinned host), waiting for
  /// the copy: what a replica's assignment writes.
  template <class T>
  static void copy_values(std::span<const T> from, std::span<T> to) {
    transport::cuda::check_cuda(
        cudaMemcpy(to.data(), from.data(), from.size_bytes(), cudaMemcpyDefault), -1, "assign",
        "cudaMemcpy of the assigned value");
  }
};

}  // namespace strata::placement

#endif  // STRATA_HAS_CUDA
