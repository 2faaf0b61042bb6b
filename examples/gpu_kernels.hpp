// examples/gpu_kernels.hpp — the example's CUDA kernel, as the host code calls it (defined in
// gpu_kernels.cu, compiled by nvcc). Plain C++: both compilers read it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace example {

/// Queues on the current device's default stream the gradient of the logistic loss over the
/// examples `rows[0..count)` of `inputs` (examples × features, row-major) and `targets`, at
/// weights `weights` and bias `*bias`, each scaled by `scale`, into `grad_w`, `grad_b[0]` and
/// `loss[0]`: the arithmetic of example::host_gradients, in the same order. Every pointer is
/// memory the device reaches. Returns the launch's cudaError_t as an int (0: queued).
int launch_gradients(const float* inputs, const float* targets, std::size_t features,
                     const std::int64_t* rows, std::size_t count, const float* weights,
                     const float* bias, float scale, float* grad_w, float* grad_b, float* loss);

}  // namespace example
