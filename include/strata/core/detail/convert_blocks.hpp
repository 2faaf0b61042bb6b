// strata/core/detail/convert_blocks.hpp — arrays of float narrowed to the 16-bit floats and
// widened back, at the widest instruction set the CPU runs (half_conversions.hpp holds each
// set's loops), bit for bit the element conversions of bfloat16.hpp and float16.hpp.
//
// What compressed gradient buckets (fusion/gradient_buckets.hpp) spend their CPU on: one element
// at a time, narrowing ResNet-50's 25.6 M gradients costs more than the bytes it saves on the wire.
#pragma once

#include <cstddef>
#include <cstdint>

#include <strata/core/bfloat16.hpp>
#include <strata/core/detail/half_conversions.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/float16.hpp>

namespace strata::detail {

/// `out[i] = bfloat16(in[i])` for n floats.
inline void narrow(bfloat16* __restrict out, const float* __restrict in, std::size_t n) {
  run_on(best_isa(), [&](auto isa) { narrow_halves<decltype(isa)::value>(out, in, n); });
}

/// `out[i] = float(in[i])` for n bfloat16.
inline void widen(float* __restrict out, const bfloat16* __restrict in, std::size_t n) {
  run_on(best_isa(), [&](auto isa) { widen_halves<decltype(isa)::value>(out, in, n); });
}

/// `out[i] = float16(in[i])` for n floats, with F16C where the CPU has it.
inline void narrow(float16* __restrict out, const float* __restrict in, std::size_t n) {
  run_on(best_isa(), [&](auto isa) { narrow_halves<decltype(isa)::value>(out, in, n); });
}

/// `out[i] = float(in[i])` for n float16, with F16C where the CPU has it.
inline void widen(float* __restrict out, const float16* __restrict in, std::size_t n) {
  run_on(best_isa(), [&](auto isa) { widen_halves<decltype(isa)::value>(out, in, n); });
}

}  // namespace strata::detail
