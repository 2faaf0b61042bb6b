// strata/transport/cuda/impl/kernels.cuh — the definitions of transport/cuda/kernels.hpp, for
// nvcc (the strata::cuda library compiles them once, with --fmad=false so that sums and
// updates round as the host's do).
#pragma once

#if !defined(__CUDACC__)
#error "strata/transport/cuda/impl/kernels.cuh is compiled by a CUDA compiler (nvcc)"
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <strata/transport/cuda/kernels.hpp>

namespace strata::transport::cuda::kernels {

namespace detail {

constexpr unsigned kThreads = 256;

inline unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks == 0 ? 1 : blocks) : 4096);
}

// How each element type is loaded, combined and stored: integers in their unsigned type (so
// sums and products wrap), 16-bit floats in float, rounded to nearest even once at the end.
template <class Stored>
struct Arithmetic {
  using Value = Stored;
  __device__ static Value load(Stored x) { return x; }
  __device__ static Stored store(Value x) { return x; }
};
template <>
struct Arithmetic<__half> {
  using Value = float;
  __device__ static float load(__half x) { return __half2float(x); }
  __device__ static __half store(float x) { return __float2half_rn(x); }
};
template <>
struct Arithmetic<__nv_bfloat16> {
  using Value = float;
  __device__ static float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ static __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};

template <class T>
struct Wrapping {
  using type = T;
};
template <>
struct Wrapping<std::int8_t> {
  using type = std::uint8_t;
};
template <>
struct Wrapping<std::int32_t> {
  using type = std::uint32_t;
};
template <>
struct Wrapping<std::int64_t> {
  using type = std::uint64_t;
};

template <class V>
__device__ V combine(Op op, V a, V b) {
  switch (op) {
    case Op::product:
      if constexpr (std::is_integral_v<V>) {  // in the unsigned type: wraps, never overflows
        using W = typename Wrapping<V>::type;
        return static_cast<V>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
      } else {
        return a * b;
      }
    case Op::min:
      return b < a ? b : a;
    case Op::max:
      return a < b ? b : a;
    case Op::sum:
    case Op::mean:
    default:
      if constexpr (std::is_integral_v<V>) {
        using W = typename Wrapping<V>::type;
        return static_cast<V>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
      } else {
        return a + b;
      }
  }
}

template <class Stored>
__global__ void reduce_slots_kernel(Op op, Stored* out, const Stored* slots, std::size_t slot_count,
                                    std::size_t count, const Stored* own, std::size_t own_slot) {
  using A = Arithmetic<Stored>;
  using V = typename A::Value;
  const auto element = [&](std::size_t j, std::size_t i) {
    return A::load(j == own_slot ? own[i] : slots[j * count + i]);
  };
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    V value = element(0, i);
    for (std::size_t j = 1; j < slot_count; ++j)
      value = combine<V>(op, value, element(j, i));
    if (op == Op::mean) value = value / static_cast<V>(slot_count);
    out[i] = A::store(value);
  }
}

template <class Stored>
cudaError_t launch_reduce(Op op, void* out, const void* slots, std::size_t slot_count,
                          std::size_t count, const void* own, std::size_t own_slot,
                          cudaStream_t stream) {
  reduce_slots_kernel<Stored><<<blocks_for(count), kThreads, 0, stream>>>(
      op, static_cast<Stored*>(out), static_cast<const Stored*>(slots), slot_count, count,
      static_cast<const Stored*>(own), own_slot);
  return cudaGetLastError();
}

template <class Rule, class T>
__global__ void apply_rule_kernel(Rule rule, T* params, const T* grads, T* slots, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    rule(params, grads, slots, n, i);
}

}  // namespace detail

cudaError_t reduce_slots(Element type, Op op, void* out, const void* slots, std::size_t slot_count,
                         std::size_t count, const void* own, std::size_t own_slot,
                         cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  if (slot_count == 0) return cudaErrorInvalidValue;
  switch (type) {
    case Element::int8:
      return detail::launch_reduce<std::int8_t>(op, out, slots, slot_count, count, own, own_slot,
                                                stream);
    case Element::uint8:
      return detail::launch_reduce<std::uint8_t>(op, out, slots, slot_count, count, own, own_slot,
                                                 stream);
    case Element::int32:
      return detail::launch_reduce<std::int32_t>(op, out, slots, slot_count, count, own, own_slot,
                                                 stream);
    case Element::int64:
      return detail::launch_reduce<std::int64_t>(op, out, slots, slot_count, count, own, own_slot,
                                                 stream);
    case Element::float16:
      return detail::launch_reduce<__half>(op, out, slots, slot_count, count, own, own_slot,
                                           stream);
    case Element::bfloat16:
      return detail::launch_reduce<__nv_bfloat16>(op, out, slots, slot_count, count, own, own_slot,
                                                  stream);
    case Element::float32:
      return detail::launch_reduce<float>(op, out, slots, slot_count, count, own, own_slot, stream);
    case Element::float64:
      return detail::launch_reduce<double>(op, out, slots, slot_count, count, own, own_slot,
                                           stream);
  }
  return cudaErrorInvalidValue;
}

template <class Rule, class T>
cudaError_t apply_rule(const Rule& rule, T* params, const T* grads, T* slots, std::size_t n,
                       cudaStream_t stream) noexcept {
  if (n == 0) return cudaSuccess;
  detail::apply_rule_kernel<<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(
      rule, params, grads, slots, n);
  return cudaGetLastError();
}

#define STRATA_CUDA_APPLY_RULE(Rule, T)                                                      \
  template cudaError_t apply_rule<Rule<T>, T>(const Rule<T>&, T*, const T*, T*, std::size_t, \
                                              cudaStream_t) noexcept;
STRATA_CUDA_APPLY_RULE(optim::SgdRule, float)
STRATA_CUDA_APPLY_RULE(optim::SgdRule, double)
STRATA_CUDA_APPLY_RULE(optim::MomentumRule, float)
STRATA_CUDA_APPLY_RULE(optim::MomentumRule, double)
STRATA_CUDA_APPLY_RULE(optim::NesterovMomentumRule, float)
STRATA_CUDA_APPLY_RULE(optim::NesterovMomentumRule, double)
STRATA_CUDA_APPLY_RULE(optim::AdamRule, float)
STRATA_CUDA_APPLY_RULE(optim::AdamRule, double)
#undef STRATA_CUDA_APPLY_RULE

}  // namespace strata::transport::cuda::kernels
