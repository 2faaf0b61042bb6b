// strata/core/detail/reduce_half_blocks.hpp — float16 and bfloat16 reduction converting whole
// blocks.
//
// Every instruction set reduces a 16-bit float block by widening each input's block to float
// once (half_conversions.hpp), combining the floats in the portable loops' order and narrowing
// the result once: the same bits as element by element, and one conversion loop per set
// instead of one inlined into each operator's loops.
#pragma once

#include <cstddef>

#include <strata/core/data_type.hpp>
#include <strata/core/detail/half_conversions.hpp>
#include <strata/core/detail/reduce_convert.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/detail/reduce_kernels.hpp>
#include <strata/core/detail/reduce_ops.hpp>

namespace strata::detail {

/// What `Fin` does before its rounding to T, on a float.
template <class T>
inline float before_rounding(Narrow<T>, float value) noexcept {
  return value;
}

template <class T>
inline float before_rounding(NarrowMean<T> mean, float value) noexcept {
  return value / mean.divisor;
}

/// reduce_blocks for float16 and bfloat16: each input's block is widened once, the operator
/// runs on floats in the same order as the portable loops, and the result is narrowed once.
/// Any input may be `out` (it is read before `out` is written).
template <Isa kIsa, class Half, class F, class Fin>
requires is_half_precision_v<Half>
inline void reduce_half_blocks(Half* out, const Half* const* inputs, std::size_t k,
                               std::size_t count, F f, Fin fin) {
  alignas(64) float acc[kReduceBlock];
  alignas(64) float next[kReduceBlock];
  for_each_block(
      out, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
        widen_halves<kIsa>(acc, inputs[0] + base, n);
        for (std::size_t j = 1; j < k; ++j) {
          widen_halves<kIsa>(next, inputs[j] + base, n);
          combine_next<float>(acc, next, n, f);
        }
        for (std::size_t i = 0; i < n; ++i)
          acc[i] = before_rounding(fin, acc[i]);
        narrow_halves<kIsa>(out + base, acc, n);
      });
}

}  // namespace strata::detail
