// strata/core/detail/reduce_half_blocks.hpp — float16 reduction converting whole blocks with
// F16C.
//
// Where the kernels run AVX2 or AVX-512, a float16 block is widened and narrowed with F16C's
// vector conversions instead of element by element, with the same bits.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include <strata/core/detail/reduce_convert.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/detail/reduce_kernels.hpp>
#include <strata/core/detail/reduce_ops.hpp>
#include <strata/core/float16.hpp>

#if STRATA_REDUCE_DISPATCH
#include <immintrin.h>
#endif

namespace strata::detail {

/// float16 converts in blocks with F16C where the kernels run AVX2 or wider (those sets require
/// it): bit for bit the portable conversions (round to nearest even, NaNs quieted with their
/// top payload bits), except that a signalling NaN widens to the quiet one; every operation
/// quiets it anyway, and which payload a NaN result carries is not promised.
template <Isa kIsa, class T>
inline constexpr bool kHalvesInBlocks = (kIsa != Isa::baseline) && std::is_same_v<T, float16>;

#if STRATA_REDUCE_DISPATCH
// Out of line: an intrinsic needs its target in every function it is inlined into, and a call
// per block costs nothing next to converting 1024 elements. The 512-bit conversions are the
// masked forms with a zero source: g++ 12 warns (-Wmaybe-uninitialized) about the unmasked
// forms' undefined one.
[[gnu::target("avx2,f16c"), gnu::noinline]] inline void widen_halves_avx2(
    float* __restrict out, const float16* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  if (i < n) {  // the last 1-7 through a zero-padded vector, so that every element converts alike
    float16 padded[8] = {};
    float wide[8];
    std::memcpy(padded, in + i, (n - i) * sizeof(float16));
    _mm256_storeu_ps(wide, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<__m128i*>(padded))));
    std::memcpy(out + i, wide, (n - i) * sizeof(float));
  }
}

[[gnu::target("avx2,f16c"), gnu::noinline]] inline void narrow_halves_avx2(
    float16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  if (i < n) {
    float padded[8] = {};
    float16 narrow[8];
    std::memcpy(padded, in + i, (n - i) * sizeof(float));
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(padded), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(narrow), h);
    std::memcpy(out + i, narrow, (n - i) * sizeof(float16));
  }
}

[[gnu::target("avx2,f16c,avx512f"), gnu::noinline]] inline void widen_halves_avx512(
    float* __restrict out, const float16* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xffff, h));
  }
  widen_halves_avx2(out + i, in + i, n - i);
}

[[gnu::target("avx2,f16c,avx512f"), gnu::noinline]] inline void narrow_halves_avx512(
    float16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  narrow_halves_avx2(out + i, in + i, n - i);
}
#endif

/// `out[i] = float(in[i])` for n float16, with F16C's instructions at `kIsa`'s width (the
/// portable conversion at baseline).
template <Isa kIsa>
inline void widen_halves(float* __restrict out, const float16* __restrict in, std::size_t n) {
#if STRATA_REDUCE_DISPATCH
  if constexpr (kIsa == Isa::avx512) {
    return widen_halves_avx512(out, in, n);
  } else if constexpr (kIsa == Isa::avx2) {
    return widen_halves_avx2(out, in, n);
  }
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = half_bits_to_float(in[i].bits());
}

/// `out[i] = float16(in[i])` for n floats, rounding to nearest even.
template <Isa kIsa>
inline void narrow_halves(float16* __restrict out, const float* __restrict in, std::size_t n) {
#if STRATA_REDUCE_DISPATCH
  if constexpr (kIsa == Isa::avx512) {
    return narrow_halves_avx512(out, in, n);
  } else if constexpr (kIsa == Isa::avx2) {
    return narrow_halves_avx2(out, in, n);
  }
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = float16::from_bits(float_to_half_bits(in[i]));
}

/// What `Fin` does before its rounding to T, on a float.
template <class T>
inline float before_rounding(Narrow<T>, float value) noexcept {
  return value;
}

template <class T>
inline float before_rounding(NarrowMean<T> mean, float value) noexcept {
  return value / mean.divisor;
}

/// reduce_blocks for float16 converting in blocks: each input's block is widened once, the
/// operator runs on floats in the same order as the portable loops, and the result is narrowed
/// once. Any input may be `out` (it is read before `out` is written).
template <Isa kIsa, class F, class Fin>
inline void reduce_half_blocks(float16* out, const float16* const* inputs, std::size_t k,
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
