// strata/transport/cuda/kernels.hpp — the CUDA kernels strata launches, declared for every
// compiler. nvcc compiles them once (transport/cuda/impl/kernels.cuh, the strata::cuda
// library, linked beside strata::strata for the GPU path), so that no unit including strata
// needs a CUDA compiler. Without CMake, compile one .cu file that includes that .cuh.
//
// This header includes nothing that a CUDA compiler cannot parse.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include <strata/optim/rules.hpp>

namespace strata::transport::cuda::kernels {

/// Element types, with strata::DataType's values (transport/cuda/reduce.hpp checks that).
enum class Element : std::uint8_t {
  int8,
  uint8,
  int32,
  int64,
  float16,
  bfloat16,
  float32,
  float64
};
/// Reductions, with strata::ReduceOp's values and meaning.
enum class Op : std::uint8_t { sum, product, min, max, mean };

/// Queues on `stream`: `out[i] = slot[0][i] op slot[1][i] op ... op slot[k-1][i]` for i < count,
/// slot j starting `j · count` elements after `slots` (k = slot_count ≥ 1), except slot
/// `own_slot`, which is read from `own` (the reducing rank's input, read where it is), combined
/// in slot order with strata::reduce_n's semantics: integers wrap, 16-bit floats are combined
/// in float and rounded once, a mean divides the sum by k. `out` may be `own` (in place) but
/// must not overlap the slots.
cudaError_t reduce_slots(Element type, Op op, void* out, const void* slots, std::size_t slot_count,
                         std::size_t count, const void* own, std::size_t own_slot,
                         cudaStream_t stream) noexcept;

/// Queues on `stream` the optimizer update `rule` (optim/rules.hpp) over `n` parameters:
/// rule(params, grads, slots, n, i) for every i < n. Instantiated for the rules of Sgd,
/// Momentum and Adam, for float and double.
template <class Rule, class T>
cudaError_t apply_rule(const Rule& rule, T* params, const T* grads, T* slots, std::size_t n,
                       cudaStream_t stream) noexcept;

}  // namespace strata::transport::cuda::kernels

#endif  // STRATA_HAS_CUDA
