// examples/gpu_gradients.hpp — the example's replica workspace on a GPU: the problem in the
// replica's device memory, gradients computed there by a CUDA kernel (gpu_kernels.cu). With
// it, example::train runs unchanged on GpuMirroredStrategy and GpuCentralStorageStrategy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include <strata/strata.hpp>

#include "gpu_kernels.hpp"
#include "logistic_regression.hpp"

namespace example {

class DeviceWorkspace {
 public:
  DeviceWorkspace(const Problem& problem, int /*local_replica*/) : problem_(&problem) {}

  /// Runs on the replica's thread, whose current device is the replica's (the strategy's
  /// doing); `weights` and `bias` are what the replica reads: device or pinned host memory.
  float gradients(std::span<const std::size_t> rows, std::span<const float> weights,
                  std::span<const float> bias, float scale) {
    if (grad_w_.size() == 0) upload();
    const std::vector<std::int64_t> indices(rows.begin(), rows.end());
    rows_.copy_from(std::span(indices));
    check(launch_gradients(inputs_.data(), targets_.data(), problem_->features, rows_.data(),
                           indices.size(), weights.data(), bias.data(), scale, grad_w_.data(),
                           grad_b_.data(), loss_.data()));
    float loss = 0;
    loss_.copy_to(std::span(&loss, 1));  // waits for the kernel
    return loss;
  }
  std::span<float> grad_w() { return grad_w_.span(); }
  std::span<float> grad_b() { return grad_b_.span(); }

 private:
  template <class T>
  using Buffer = strata::transport::cuda::DeviceBuffer<T>;

  // The problem and the buffers, in the memory of the replica's device (current on its thread).
  void upload() {
    inputs_ = Buffer<float>(problem_->inputs.size());
    inputs_.copy_from(std::span(problem_->inputs));
    targets_ = Buffer<float>(problem_->targets.size());
    targets_.copy_from(std::span(problem_->targets));
    rows_ = Buffer<std::int64_t>(problem_->examples());
    grad_w_ = Buffer<float>(problem_->features);
    grad_b_ = Buffer<float>(1);
    loss_ = Buffer<float>(1);
  }

  static void check(int status) {
    strata::transport::cuda::check_cuda(static_cast<cudaError_t>(status), -1, "example",
                                        "the gradient kernel");
  }

  const Problem* problem_;
  Buffer<float> inputs_, targets_;
  Buffer<std::int64_t> rows_;
  Buffer<float> grad_w_, grad_b_, loss_;
};

template <class Strategy>
requires strata::placement::kOnDevice<typename Strategy::placement_type>
struct WorkspaceOf<Strategy> {
  using type = DeviceWorkspace;
};

}  // namespace example
