// strata/core/detail/convert_blocks.hpp — arrays of float narrowed to the 16-bit floats and
// widened back, at the widest instruction set the CPU runs (reduce_isa.hpp), bit for bit the
// element conversions of bfloat16.hpp and float16.hpp; large outputs with streaming stores, as
// streaming_copy.hpp says why.
//
// What compressed gradient buckets (fusion/gradient_buckets.hpp) spend their CPU on: one element
// at a time, narrowing ResNet-50's 25.6 M gradients costs more than the bytes it saves on the wire.
#pragma once

#include <cstddef>
#include <cstdint>

#include <strata/core/bfloat16.hpp>
#include <strata/core/detail/reduce_half_blocks.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/detail/streaming_copy.hpp>
#include <strata/core/float16.hpp>

#if STRATA_REDUCE_DISPATCH
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace strata::detail {

#if STRATA_REDUCE_DISPATCH
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
// keeps its top bits and is quieted. Out of line, as reduce_half_blocks.hpp's conversions.
[[gnu::target("avx2"), gnu::noinline]] inline void narrow_bfloat16_avx2(bfloat16* __restrict out,
                                                                        const float* __restrict in,
                                                                        std::size_t n) noexcept {
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
[[gnu::target("avx2,avx512f,avx512bw,avx512vl,avx512bf16"), gnu::noinline]] inline void
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

[[gnu::target("avx2"), gnu::noinline]] inline void widen_bfloat16_avx2(
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
#endif

/// `out[i] = bfloat16(in[i])` for n floats.
inline void narrow(bfloat16* __restrict out, const float* __restrict in, std::size_t n) noexcept {
#if STRATA_REDUCE_DISPATCH
  if (has_avx512_bf16()) return narrow_bfloat16_avx512_bf16(out, in, n);
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
