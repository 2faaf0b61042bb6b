// strata/core/detail/convert_blocks.hpp — arrays of float narrowed to the 16-bit floats and
// widened back, at the widest instruction set the CPU runs (reduce_isa.hpp), bit for bit the
// element conversions of bfloat16.hpp and float16.hpp.
//
// What compressed gradient buckets (fusion/gradient_buckets.hpp) spend their CPU on: one element
// at a time, narrowing ResNet-50's 25.6 M gradients costs more than the bytes it saves on the wire.
#pragma once

#include <cstddef>
#include <cstdint>

#include <strata/core/bfloat16.hpp>
#include <strata/core/detail/reduce_half_blocks.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/float16.hpp>

#if STRATA_REDUCE_DISPATCH
#include <immintrin.h>
#endif

namespace strata::detail {

#if STRATA_REDUCE_DISPATCH
// bfloat16's rounding in 32-bit lanes: (x + 0x7fff + lsb) >> 16, where lsb is bit 16 of x; a NaN
// keeps its top bits and is quieted. Out of line, as reduce_half_blocks.hpp's conversions.
[[gnu::target("avx2"), gnu::noinline]] inline void narrow_bfloat16_avx2(bfloat16* __restrict out,
                                                                        const float* __restrict in,
                                                                        std::size_t n) noexcept {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x0040);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i odd = _mm256_and_si256(high, one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), odd), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, magnitude), infinity);
    const __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // Every lane holds a value below 2^16, so the saturating pack keeps it; the pack works per
    // 128-bit half, and the permute brings the two halves' results together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i)
    out[i] = bfloat16(in[i]);
}

[[gnu::target("avx2"), gnu::noinline]] inline void widen_bfloat16_avx2(
    float* __restrict out, const bfloat16* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), wide);
  }
  for (; i < n; ++i)
    out[i] = static_cast<float>(in[i]);
}
#endif

/// `out[i] = bfloat16(in[i])` for n floats.
inline void narrow(bfloat16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
#if STRATA_REDUCE_DISPATCH
  if (best_isa() != Isa::baseline) return narrow_bfloat16_avx2(out, in, n);
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = bfloat16(in[i]);
}

/// `out[i] = float(in[i])` for n bfloat16.
inline void widen(float* __restrict out, const bfloat16* __restrict in, std::size_t n) noexcept {
#if STRATA_REDUCE_DISPATCH
  if (best_isa() != Isa::baseline) return widen_bfloat16_avx2(out, in, n);
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<float>(in[i]);
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
