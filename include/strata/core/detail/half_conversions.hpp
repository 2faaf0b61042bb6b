// strata/core/detail/half_conversions.hpp — arrays of float16 and bfloat16 widened to float and
// narrowed back, compiled for each instruction set of the reduction kernels (reduce_isa.hpp),
// bit for bit the element conversions of float16.hpp and bfloat16.hpp.
//
// The kernels convert a block at a time through these (reduce_half_blocks.hpp) and the
// compressed gradient buckets whole arrays (convert_blocks.hpp): one out-of-line loop per set
// instead of a conversion inlined into every loop of every operator, which is both faster and
// far cheaper to compile. Large outputs go through streaming stores, as streaming_copy.hpp says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <strata/core/bfloat16.hpp>
#include <strata/core/detail/reduce_convert.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/detail/streaming_copy.hpp>
#include <strata/core/float16.hpp>

#if STRATA_REDUCE_DISPATCH
#include <cpuid.h>
#include <immintrin.h>
#endif

// The conversions are out of line: an intrinsic needs its target in every function it is
// inlined into, and a call per block costs nothing next to converting 1024 elements. g++ also
// keeps them out of its interprocedural constant propagation, whose clones for a block's
// constant length make g++ 12 warn falsely (-Waggressive-loop-optimizations) at -O3.
#if defined(__clang__)
#define STRATA_OUT_OF_LINE gnu::noinline
#else
#define STRATA_OUT_OF_LINE gnu::noipa
#endif

namespace strata::detail {

#if STRATA_REDUCE_DISPATCH
// The 512-bit conversions are the masked forms with a zero source: g++ 12 warns
// (-Wmaybe-uninitialized) about the unmasked forms' undefined one.
[[gnu::target("avx2,f16c"), STRATA_OUT_OF_LINE]] inline void widen_halves_avx2(
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

[[gnu::target("avx2,f16c"), STRATA_OUT_OF_LINE]] inline void narrow_halves_avx2(
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

[[gnu::target("avx2,f16c,avx512f"), STRATA_OUT_OF_LINE]] inline void widen_halves_avx512(
    float* __restrict out, const float16* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xffff, h));
  }
  widen_halves_avx2(out + i, in + i, n - i);
}

[[gnu::target("avx2,f16c,avx512f"), STRATA_OUT_OF_LINE]] inline void narrow_halves_avx512(
    float16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h =
        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  narrow_halves_avx2(out + i, in + i, n - i);
}
// Whether the CPU converts float to bfloat16 itself (AVX512_BF16: CPUID leaf 7, subleaf 1,
// EAX bit 5), beside the AVX-512 the kernels need.
inline bool has_avx512_bf16() noexcept {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return best_isa() == Isa::avx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
           (eax & (1u << 5)) != 0;
  }();
  return has;
}

// Elements converted one at a time until `out + i` is aligned to `alignment` bytes, as a
// streaming store needs: returns that i (n when it never is).
template <class To, class From>
inline std::size_t convert_until_aligned(To* out, const From* in, std::size_t n,
                                         std::size_t alignment) noexcept {
  std::size_t i = 0;
  while (i < n && reinterpret_cast<std::uintptr_t>(out + i) % alignment != 0) {
    out[i] = To(in[i]);
    ++i;
  }
  return i;
}

// bfloat16's rounding in 32-bit lanes: (x + 0x7fff + lsb) >> 16, where lsb is bit 16 of x; a NaN
// keeps its top bits and is quieted.
[[gnu::target("avx2"), STRATA_OUT_OF_LINE]] inline void narrow_bfloat16_avx2(
    bfloat16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
  const bool streaming = n * sizeof(bfloat16) >= kStreamingBytes;
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x0040);
  std::size_t i = streaming ? convert_until_aligned(out, in, n, 16) : 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i high = _mm256_srli_epi32(x, 16);
    const __m256i odd = _mm256_and_si256(high, one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, bias), odd), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, magnitude), infinity);
    const __m256i bits = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // Every lane holds a value below 2^16, so the saturating pack keeps it; the pack works per
    // 128-bit half, and the permute brings the two halves' results together.
    const __m128i packed =
        _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0b1000));
    if (streaming)
      _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), packed);
    else
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  if (streaming) _mm_sfence();
  for (; i < n; ++i)
    out[i] = bfloat16(in[i]);
}

// The CPU's own conversion (VCVTNE2PS2BF16) rounds as bfloat16.hpp does, and quiets a NaN the
// same way, but flushes subnormals to zero: a block holding one converts element by element.
[[gnu::target("avx2,avx512f,avx512bw,avx512vl,avx512bf16"), STRATA_OUT_OF_LINE]] inline void
narrow_bfloat16_avx512_bf16(bfloat16* __restrict out, const float* __restrict in,
                            std::size_t n) noexcept {
  const bool streaming = n * sizeof(bfloat16) >= kStreamingBytes;
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i fraction = _mm512_set1_epi32(0x007fffff);
  std::size_t i = streaming ? convert_until_aligned(out, in, n, 64) : 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i low = _mm512_loadu_si512(in + i);
    const __m512i high = _mm512_loadu_si512(in + i + 16);
    const __mmask16 subnormal_low =
        _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(low, exponent), low, fraction);
    const __mmask16 subnormal_high =
        _mm512_mask_test_epi32_mask(_mm512_testn_epi32_mask(high, exponent), high, fraction);
    if ((subnormal_low | subnormal_high) != 0) {
      for (std::size_t j = i; j < i + 32; ++j)
        out[j] = bfloat16(in[j]);
      continue;
    }
    // A vector cast: the same 64 bytes, now as integers to store.
    const auto packed =
        (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(high), _mm512_castsi512_ps(low));
    if (streaming)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), packed);
    else
      _mm512_storeu_si512(out + i, packed);
  }
  if (streaming) _mm_sfence();
  for (; i < n; ++i)
    out[i] = bfloat16(in[i]);
}

[[gnu::target("avx2"), STRATA_OUT_OF_LINE]] inline void widen_bfloat16_avx2(
    float* __restrict out, const bfloat16* __restrict in, std::size_t n) noexcept {
  const bool streaming = n * sizeof(float) >= kStreamingBytes;
  std::size_t i = streaming ? convert_until_aligned(out, in, n, 32) : 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    if (streaming)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), wide);
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), wide);
  }
  if (streaming) _mm_sfence();
  for (; i < n; ++i)
    out[i] = static_cast<float>(in[i]);
}

[[gnu::target("avx2,avx512f,avx512bw,avx512vl"), STRATA_OUT_OF_LINE]] inline void
widen_bfloat16_avx512(float* __restrict out, const bfloat16* __restrict in,
                      std::size_t n) noexcept {
  const bool streaming = n * sizeof(float) >= kStreamingBytes;
  std::size_t i = streaming ? convert_until_aligned(out, in, n, 64) : 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    // The masked forms with a zero source, as in widen_halves_avx512.
    const __m512i wide =
        _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16);
    if (streaming)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), wide);
    else
      _mm512_storeu_si512(out + i, wide);
  }
  if (streaming) _mm_sfence();
  for (; i < n; ++i)
    out[i] = static_cast<float>(in[i]);
}
#endif

/// `out[i] = float(in[i])` for n float16 or bfloat16, with `kIsa`'s vector conversions (F16C's
/// for float16; the portable, branch-free ones at baseline).
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

template <Isa kIsa>
inline void widen_halves(float* __restrict out, const bfloat16* __restrict in, std::size_t n) {
#if STRATA_REDUCE_DISPATCH
  if constexpr (kIsa == Isa::avx512) {
    return widen_bfloat16_avx512(out, in, n);
  } else if constexpr (kIsa == Isa::avx2) {
    return widen_bfloat16_avx2(out, in, n);
  }
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = widen<bfloat16>(in[i]);
}

/// `out[i] = T(in[i])` for n floats, rounding to nearest even, for T float16 or bfloat16.
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

template <Isa kIsa>
inline void narrow_halves(bfloat16* __restrict out, const float* __restrict in, std::size_t n) {
#if STRATA_REDUCE_DISPATCH
  if constexpr (kIsa == Isa::avx512) {
    if (has_avx512_bf16()) return narrow_bfloat16_avx512_bf16(out, in, n);
    return narrow_bfloat16_avx2(out, in, n);
  } else if constexpr (kIsa == Isa::avx2) {
    return narrow_bfloat16_avx2(out, in, n);
  }
#endif
  for (std::size_t i = 0; i < n; ++i)
    out[i] = narrow<bfloat16>(in[i]);
}

}  // namespace strata::detail
