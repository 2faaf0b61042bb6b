// examples/gpu_kernels.cu — the example's gradient kernel (see gpu_kernels.hpp).
#include <cuda_runtime.h>

#include "gpu_kernels.hpp"

namespace example {

namespace {

// Thread j < features sums feature j's gradient over the rows, in row order; thread `features`
// sums the bias' gradient and the loss. One block: the example's models are small.
__global__ void gradients(const float* inputs, const float* targets, std::size_t features,
                          const std::int64_t* rows, std::size_t count, const float* weights,
                          const float* bias, float scale, float* grad_w, float* grad_b,
                          float* loss) {
  const std::size_t j = threadIdx.x;
  if (j > features) return;
  float gradient = 0;
  float sum_loss = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const float* x = inputs + static_cast<std::size_t>(rows[k]) * features;
    const float y = targets[rows[k]];
    float z = bias[0];
    for (std::size_t i = 0; i < features; ++i)
      z += x[i] * weights[i];
    const float p = 1.0f / (1.0f + expf(-z));
    if (j < features) {
      gradient += (p - y) * x[j];
    } else {
      sum_loss -= y * logf(p) + (1 - y) * logf(1 - p);
      gradient += p - y;
    }
  }
  if (j < features) {
    grad_w[j] = gradient * scale;
  } else {
    grad_b[0] = gradient * scale;
    loss[0] = sum_loss * scale;
  }
}

}  // namespace

int launch_gradients(const float* inputs, const float* targets, std::size_t features,
                     const std::int64_t* rows, std::size_t count, const float* weights,
                     const float* bias, float scale, float* grad_w, float* grad_b, float* loss) {
  if (features + 1 > 1024) return static_cast<int>(cudaErrorInvalidValue);
  gradients<<<1, static_cast<unsigned>(features + 1)>>>(inputs, targets, features, rows, count,
                                                        weights, bias, scale, grad_w, grad_b, loss);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace example
