// strata/core/reduce.hpp — the element-wise reduction kernels inside every collective.
//
// Computes:    reduce_n:   out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[k-1][i]
//              accumulate: inout[i] = inout[i] op in[i]
//              divide:     data[i] /= divisor (the last step of a mean)
//              with the semantics of `ReduceOp` (core/reduce_op.hpp): integers wrap around,
//              16-bit floats are combined in float, min/max are exact.
// Requires:    every input holds as many elements as the output; the output may be exactly
//              one or more of the inputs (in-place) but must not otherwise overlap them.
// Determinism: inputs are combined strictly in the order given, inputs[0] first, one element
//              at a time: no reassociation, so the bits do not depend on the count, alignment,
//              block size or instruction set. Every rank reducing the same inputs in the same
//              order gets the same bits. The one exception is IEEE 754's: where two NaNs meet,
//              which payload the NaN result carries may differ between instruction sets.
// Cost:        one read of each input and one write of the output, processed in blocks of
//              1024 elements whose accumulator stays in L1; the inner loops are branch-free
//              and vectorize at -O2 and -O3 without -march flags. On x86-64 (GCC, Clang) they
//              are also compiled for AVX2 and AVX-512 and the widest set the CPU has runs, with
//              the same bits. Integers, float and double run at memory speed for large counts
//              (two-input sum: about memcpy's bytes/s; benchmarks/core/reduce_bench.cpp).
//              float16 converts in blocks with F16C's instructions where the CPU has AVX2
//              (the same bits as the portable conversions); bfloat16 converts in integer
//              vector code.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <strata/core/bfloat16.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/float16.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata {

/// Reduces `inputs.size()` arrays element-wise into `out`:
/// `out[i] = inputs[0][i] op inputs[1][i] op ... op inputs[k-1][i]` for `i < out.size()`;
/// `mean` is the sum divided by `inputs.size()` (integers: truncation toward zero). float16
/// and bfloat16 are combined in float and rounded once, at the end. One input is a copy.
///
/// Call it with the element type spelled out so that containers convert to the spans:
///
///     std::vector<float> mine(n), theirs(n);
///     const float* const inputs[] = {mine.data(), theirs.data()};
///     strata::reduce_n<float>(mine, inputs, strata::ReduceOp::sum);  // mine += theirs
///
/// @param out     the result; `out.data()` may equal any `inputs[j]` (in-place), but must not
///                otherwise overlap an input.
/// @param inputs  pointers to `out.size()` elements each, combined in this order. The same
///                pointer may appear more than once.
/// @throws UsageError (operation "reduce_n") when `inputs` is empty, `op` is not a `ReduceOp`,
///         or, for a non-empty `out`, an input is null or partially overlaps `out`.
template <Element T>
void reduce_n(std::span<T> out, std::span<const T* const> inputs, ReduceOp op);

/// `inout[i] = inout[i] op in[i]`: the two-operand step of a collective that receives data
/// piece by piece. `mean` acts as `sum` here; finish it with `divide()`. float16 and bfloat16
/// round to their type on every call (there is nowhere else to keep the float).
///
/// @throws UsageError (operation "accumulate") when the sizes differ, `op` is not a
///         `ReduceOp`, or the spans partially overlap (exactly equal spans are accepted).
template <Element T>
void accumulate(std::span<T> inout, std::span<const T> in, ReduceOp op);

/// `data[i] /= divisor`, finishing a mean. Integers truncate toward zero; 16-bit floats divide
/// in float and round once.
///
/// @throws UsageError (operation "divide") when `divisor` is 0.
template <Element T>
void divide(std::span<T> data, std::size_t divisor);

/// Type-erased `reduce_n`, for communicators that carry a `DataType` tag: `out` and each
/// `inputs[j]` point at `count` elements of `type`.
///
/// @throws UsageError (operation "reduce_n") as the typed form, and when `type` is not a
///         `DataType` or a needed pointer is null.
inline void reduce_n(DataType type, void* out, const void* const* inputs, std::size_t num_inputs,
                     std::size_t count, ReduceOp op);

}  // namespace strata

namespace strata::detail {

/// Elements per block: the accumulator (4 KiB of float) stays in L1 between inputs.
inline constexpr std::size_t kReduceBlock = 1024;

/// The type elements are combined in.
template <class T>
using ReduceAcc = std::conditional_t<is_half_precision_v<T>, float, T>;

// The conversions below give exactly the bits of float16's and bfloat16's own conversions
// (tests compare them exhaustively), but without branches, so that block loops vectorize.
// They are always inlined: a call per element would cost more than the conversion. They
// choose between candidates with masks, not `?:`: g++ turns a select into a branch and
// sinks a candidate's floating-point arithmetic into it, and (under the default
// -ftrapping-math) must not execute that arithmetic speculatively, so it gives up on the loop.

/// All ones when `condition` holds, else zero.
[[gnu::always_inline]] inline std::uint32_t mask_if(bool condition) noexcept {
  return 0u - static_cast<std::uint32_t>(condition);
}

/// `mask ? a : b`, bit by bit.
[[gnu::always_inline]] inline std::uint32_t blend(std::uint32_t mask, std::uint32_t a,
                                                  std::uint32_t b) noexcept {
  return (a & mask) | (b & ~mask);
}

[[gnu::always_inline]] inline float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t shifted = (static_cast<std::uint32_t>(h) & 0x7fffu) << 13;
  const std::uint32_t exponent = shifted & 0x0f800000u;
  const std::uint32_t normal = shifted + 0x38000000u;  // rebias 15 -> 127
  // Subnormal: lend the mantissa the exponent of 2^-14, then subtract 2^-14 (exact in float).
  const float subnormal = std::bit_cast<float>(normal + 0x00800000u) - 0x1p-14f;
  std::uint32_t bits = blend(mask_if(exponent == 0x0f800000u), normal + 0x38000000u, normal);
  bits = blend(mask_if(exponent == 0), std::bit_cast<std::uint32_t>(subnormal), bits);
  return std::bit_cast<float>(bits | sign);
}

[[gnu::always_inline]] inline std::uint16_t float_to_half_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t magnitude = x & 0x7fffffffu;
  // Signed compares: SSE2 has no unsigned ones, and the magnitude fits in 31 bits.
  const auto m = static_cast<std::int32_t>(magnitude);
  const std::uint32_t normal = (magnitude - 0x38000000u + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Below 2^-14 the FPU rounds for us: 0.5f has an ulp of 2^-24, the half subnormal step. Only
  // small magnitudes enter the addition, so NaNs raise no floating-point exception here.
  const std::uint32_t is_subnormal = mask_if(m < 0x38800000);
  const float small = std::bit_cast<float>(magnitude & is_subnormal);
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(small + 0.5f) - 0x3f000000u;
  const std::uint32_t quiet_nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  std::uint32_t bits = blend(is_subnormal, subnormal, normal);
  bits = blend(mask_if(m >= 0x477ff000), 0x7c00u, bits);  // 65520 and up round to infinity
  bits = blend(mask_if(m > 0x7f800000), quiet_nan, bits);
  return static_cast<std::uint16_t>(sign | bits);
}

[[gnu::always_inline]] inline std::uint16_t float_to_bfloat16_bits(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (x >> 16) | 0x0040u;  // rounding could carry a NaN into inf
  const bool is_nan = static_cast<std::int32_t>(x & 0x7fffffffu) > 0x7f800000;
  return static_cast<std::uint16_t>(blend(mask_if(is_nan), quiet_nan, rounded));
}

template <class T>
[[gnu::always_inline]] inline ReduceAcc<T> widen(T value) noexcept {
  if constexpr (std::same_as<T, float16>) {
    return half_bits_to_float(value.bits());
  } else if constexpr (std::same_as<T, bfloat16>) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits()) << 16);
  } else {
    return value;
  }
}

template <class T>
[[gnu::always_inline]] inline T narrow(ReduceAcc<T> value) noexcept {
  if constexpr (std::same_as<T, float16>) {
    return float16::from_bits(float_to_half_bits(value));
  } else if constexpr (std::same_as<T, bfloat16>) {
    return bfloat16::from_bits(float_to_bfloat16_bits(value));
  } else {
    return value;
  }
}

// The operators, on the accumulator type. Integer sum and product run in the unsigned
// counterpart so that wrap-around is defined behaviour; the conversion back is modular.
struct SumFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProductFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Select forms that map onto minps/maxps (and pmin/pmax); ties keep the earlier operand.
struct MinFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    return b < a ? b : a;
  }
};

struct MaxFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    return a < b ? b : a;
  }
};

/// Turns a finished accumulator into an element.
template <class T>
struct Narrow {
  T operator()(ReduceAcc<T> value) const noexcept { return narrow<T>(value); }
};

/// Finishes a floating-point mean before the single rounding.
template <class T>
struct NarrowMean {
  ReduceAcc<T> divisor;
  T operator()(ReduceAcc<T> value) const noexcept { return narrow<T>(value / divisor); }
};

/// Calls `body(base, n)` for consecutive blocks covering [0, count) of the array at `written`.
/// Full blocks pass `n` as a compile-time constant, so their loops have a known trip count and
/// vectorize even under g++ -O2's cheap cost model; the first and last, partial blocks pass a
/// run-time `n`. The first ends where `written` reaches a cache line, so that the full blocks'
/// stores, and the loads of inputs placed alike (as allocators place them), do not straddle two
/// lines: 32- and 64-byte vectors lose up to half their speed in L2 when they do.
template <class T, class Body>
[[gnu::always_inline]] inline void for_each_block(const T* written, std::size_t count,
                                                  Body&& body) {
  constexpr std::size_t kLine = 64;
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(written) % kLine;
  std::size_t base = 0;
  if (offset != 0 && offset % sizeof(T) == 0) {
    base = std::min(count, (kLine - offset) / sizeof(T));
    body(std::size_t{0}, base);
  }
  for (; count - base >= kReduceBlock; base += kReduceBlock) {
    body(base, std::integral_constant<std::size_t, kReduceBlock>{});
  }
  if (base < count) body(base, count - base);
}

// The loops. `__restrict` is valid on each: the accumulator is a local array, and every
// caller has checked that `out` is disjoint from the other pointer(s) (the equal case has a
// loop of its own). Pointers that are only read may alias each other.

template <class T, class F, class N>
[[gnu::always_inline]] inline void combine_two(ReduceAcc<T>* __restrict acc, const T* __restrict a,
                                               const T* __restrict b, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = f(widen<T>(a[i]), widen<T>(b[i]));
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void combine_next(ReduceAcc<T>* __restrict acc,
                                                const T* __restrict in, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = f(acc[i], widen<T>(in[i]));
}

template <class T, class Fin, class N>
[[gnu::always_inline]] inline void store(T* __restrict out, const ReduceAcc<T>* __restrict acc, N n,
                                         Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(acc[i]);
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void finish(T* __restrict out, const ReduceAcc<T>* __restrict acc,
                                          const T* __restrict last, N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(acc[i], widen<T>(last[i])));
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void finish_in_place(T* __restrict out,
                                                   const ReduceAcc<T>* __restrict acc, N n, F f,
                                                   Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(acc[i], widen<T>(out[i])));
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void fused_two(T* __restrict out, const T* __restrict a,
                                             const T* __restrict b, N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(widen<T>(a[i]), widen<T>(b[i])));
}

// Two inputs, one of which is `out`: operands stay in input order.
template <bool kOutIsFirst, class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void fused_two_in_place(T* __restrict out, const T* __restrict other,
                                                      N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const ReduceAcc<T> mine = widen<T>(out[i]);
    const ReduceAcc<T> theirs = widen<T>(other[i]);
    out[i] = kOutIsFirst ? fin(f(mine, theirs)) : fin(f(theirs, mine));
  }
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void accumulate_disjoint(T* __restrict inout, const T* __restrict in,
                                                       N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    inout[i] = narrow<T>(f(widen<T>(inout[i]), widen<T>(in[i])));
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void accumulate_self(T* __restrict inout, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const ReduceAcc<T> value = widen<T>(inout[i]);
    inout[i] = narrow<T>(f(value, value));
  }
}

/// `x / divisor` with truncation toward zero, for any divisor >= 1 (it may exceed T's range).
template <std::integral T, class N>
[[gnu::always_inline]] inline void divide_integers(T* data, N n, std::size_t divisor) noexcept {
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<T>::max());
  if (divisor <= kMax) {
    const auto d = static_cast<T>(divisor);
    for (std::size_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(data[i] / d);
    return;
  }
  // |x| <= divisor now: the quotient is 0, except min / (max + 1) == -1 for signed T.
  const bool minus_one_for_min = std::is_signed_v<T> && divisor == kMax + 1;
  for (std::size_t i = 0; i < n; ++i) {
    data[i] = (minus_one_for_min && data[i] == std::numeric_limits<T>::min()) ? T(-1) : T(0);
  }
}

template <class T, class N>
[[gnu::always_inline]] inline void divide_block(T* data, N n, std::size_t divisor) noexcept {
  if constexpr (std::is_integral_v<T>) {
    divide_integers(data, n, divisor);
  } else {
    const auto d = static_cast<ReduceAcc<T>>(divisor);
    for (std::size_t i = 0; i < n; ++i)
      data[i] = narrow<T>(widen<T>(data[i]) / d);
  }
}

/// The instruction sets the kernels are built for, narrowest first.
enum class Isa { baseline, avx2, avx512 };

inline constexpr Isa kAllIsas[] = {Isa::baseline, Isa::avx2, Isa::avx512};

inline constexpr std::string_view name_of(Isa isa) noexcept {
  switch (isa) {
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::baseline:
      break;
  }
  return "baseline";
}

#if defined(__x86_64__) && defined(__GNUC__)
#define STRATA_REDUCE_DISPATCH 1
#else
#define STRATA_REDUCE_DISPATCH 0
#endif

template <Isa kIsa>
using IsaTag = std::integral_constant<Isa, kIsa>;

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

/// The block loop of `reduce_n` for k >= 2 inputs, element by element; `integer_mean` divides
/// each finished block.
template <class T, class F, class Fin>
[[gnu::always_inline]] inline void reduce_elementwise(T* out, const T* const* inputs, std::size_t k,
                                                      std::size_t count, F f, Fin fin,
                                                      bool integer_mean) {
  alignas(64) ReduceAcc<T> acc[kReduceBlock];
  for_each_block(
      out, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
        T* o = out + base;
        const T* first = inputs[0] + base;
        const T* second = inputs[1] + base;
        if (k == 2) {
          // One pass in every placement but the degenerate out == inputs[0] == inputs[1].
          if (o != first && o != second) {
            fused_two<T>(o, first, second, n, f, fin);
          } else if (first == second) {
            combine_two<T>(acc, first, second, n, f);
            store<T>(o, acc, n, fin);
          } else if (o == first) {
            fused_two_in_place<true>(o, second, n, f, fin);
          } else {
            fused_two_in_place<false>(o, first, n, f, fin);
          }
        } else {
          combine_two<T>(acc, first, second, n, f);
          for (std::size_t j = 2; j + 1 < k; ++j)
            combine_next<T>(acc, inputs[j] + base, n, f);
          const T* last = inputs[k - 1] + base;
          if (o == last) {
            finish_in_place<T>(o, acc, n, f, fin);
          } else {
            finish<T>(o, acc, last, n, f, fin);
          }
        }
        if (integer_mean) divide_block(o, n, k);  // while the block is still in L1
      });
}

/// The block loop of `reduce_n` for k >= 2 inputs, compiled for `kIsa`.
template <Isa kIsa, class T, class F, class Fin>
[[gnu::always_inline]] inline void reduce_blocks(T* out, const T* const* inputs, std::size_t k,
                                                 std::size_t count, F f, Fin fin,
                                                 bool integer_mean) {
  if constexpr (kHalvesInBlocks<kIsa, T>) {
    reduce_half_blocks<kIsa>(out, inputs, k, count, f, fin);
  } else {
    reduce_elementwise(out, inputs, k, count, f, fin, integer_mean);
  }
}

/// The widest instruction set this CPU (and its OS) runs; baseline off x86-64.
inline Isa best_isa() noexcept {
#if STRATA_REDUCE_DISPATCH
  static const Isa best = [] {
    __builtin_cpu_init();
    // Every CPU with AVX2 has F16C, but a hypervisor may hide it; the kernels need both.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    if (!f16c || !__builtin_cpu_supports("avx2")) return Isa::baseline;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return Isa::avx512;
    return Isa::avx2;
  }();
  return best;
#else
  return Isa::baseline;
#endif
}

#if STRATA_REDUCE_DISPATCH
// `flatten` (and, for compilers whose flatten is not recursive, `always_inline` on the block
// loops and the lambdas that reach them) inlines everything the kernel calls, so its loops are
// compiled, and vectorized, for the wrapper's instruction set whatever -march the program is built
// with. The set changes how wide the loops run, not what they compute: no FMA is enabled and each
// element is combined alone, so every set gives the same bits, except which NaN's payload a NaN
// result carries when two meet (tests/core/reduce_test.cpp checks).
template <class Kernel>
[[gnu::target("avx2,f16c"), gnu::flatten]] inline void run_avx2(const Kernel& kernel) {
  kernel(IsaTag<Isa::avx2>{});
}

template <class Kernel>
[[gnu::target("avx2,f16c,avx512f,avx512bw,avx512vl"), gnu::flatten]] inline void run_avx512(
    const Kernel& kernel) {
  kernel(IsaTag<Isa::avx512>{});
}
#endif

/// Runs `kernel(IsaTag<isa>{})` compiled for `isa`, which the CPU must support
/// (isa <= best_isa()).
template <class Kernel>
inline void run_on(Isa isa, const Kernel& kernel) {
#if STRATA_REDUCE_DISPATCH
  if (isa == Isa::avx512) return run_avx512(kernel);
  if (isa == Isa::avx2) return run_avx2(kernel);
#else
  (void)isa;
#endif
  kernel(IsaTag<Isa::baseline>{});
}

/// Applies `f` to `op`'s operator object (mean -> sum, see the callers).
template <class F>
[[gnu::always_inline]] inline decltype(auto) with_reduce_fn(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::product:
      return f(ProductFn{});
    case ReduceOp::min:
      return f(MinFn{});
    case ReduceOp::max:
      return f(MaxFn{});
    case ReduceOp::sum:
    case ReduceOp::mean:
      break;
  }
  return f(SumFn{});
}

inline bool is_valid(ReduceOp op) noexcept {
  return static_cast<unsigned>(op) <= static_cast<unsigned>(ReduceOp::mean);
}

inline void check_op(ReduceOp op, std::string_view operation) {
  if (!is_valid(op)) {
    throw UsageError(-1, operation,
                     fmt::format("{} is not a ReduceOp value", static_cast<unsigned>(op)),
                     "pass one of ReduceOp::sum, product, min, max or mean");
  }
}

/// True when [a, a + bytes) and [b, b + bytes) share a byte but do not start together.
inline bool overlaps_unequal(const void* a, const void* b, std::size_t bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x != y && x < y + bytes && y < x + bytes;
}

/// reduce_n with its kernels compiled for `isa` (tests run each set the CPU has).
template <Element T>
void reduce_n_on(Isa isa, std::span<T> out, std::span<const T* const> inputs, ReduceOp op) {
  if (inputs.empty()) {
    throw UsageError(-1, "reduce_n", "called with no inputs",
                     "pass at least one input (reducing a single input copies it)");
  }
  check_op(op, "reduce_n");
  const std::size_t count = out.size();
  if (count == 0) return;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j] == nullptr) {
      throw UsageError(-1, "reduce_n", fmt::format("input {} is null", j),
                       "every input must point at out.size() elements");
    }
    if (overlaps_unequal(out.data(), inputs[j], out.size_bytes())) {
      throw UsageError(-1, "reduce_n",
                       fmt::format("input {} overlaps the output without being equal to it", j),
                       "reduce exactly in place (out == input) or into separate memory");
    }
  }
  const std::size_t k = inputs.size();
  if (k == 1) {
    // Every op of a single input is the input itself (a mean divides by 1).
    if (out.data() != inputs[0]) std::memcpy(out.data(), inputs[0], out.size_bytes());
    return;
  }
  T* const o = out.data();
  const T* const* const in = inputs.data();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        if (op == ReduceOp::mean) {
          if constexpr (std::is_integral_v<T>) {
            reduce_blocks<kSet>(o, in, k, count, SumFn{}, Narrow<T>{}, true);
          } else {
            const NarrowMean<T> fin{static_cast<ReduceAcc<T>>(k)};
            reduce_blocks<kSet>(o, in, k, count, SumFn{}, fin, false);
          }
          return;
        }
        with_reduce_fn(
            op, [&](auto f) __attribute__((always_inline)) {
              reduce_blocks<kSet>(o, in, k, count, f, Narrow<T>{}, false);
            });
      });
}

/// accumulate with its kernels compiled for `isa`.
template <Element T>
void accumulate_on(Isa isa, std::span<T> inout, std::span<const T> in, ReduceOp op) {
  if (inout.size() != in.size()) {
    throw UsageError(-1, "accumulate",
                     fmt::format("inout has {} elements but in has {}", inout.size(), in.size()),
                     "pass spans of the same length");
  }
  check_op(op, "accumulate");
  if (overlaps_unequal(inout.data(), in.data(), inout.size_bytes())) {
    throw UsageError(-1, "accumulate", "inout and in overlap", "accumulate from a separate buffer");
  }
  T* const p = inout.data();
  const T* const q = in.data();
  const std::size_t count = inout.size();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        with_reduce_fn(
            op, [&](auto f) __attribute__((always_inline)) {
              if constexpr (kHalvesInBlocks<kSet, T>) {
                // The two-input reduce_n into inout: one rounding, as below.
                const T* const inputs[] = {p, q};
                reduce_half_blocks<kSet>(p, inputs, 2, count, f, Narrow<T>{});
              } else {
                for_each_block(
                    p, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
                      if (p == q) {
                        accumulate_self<T>(p + base, n, f);
                      } else {
                        accumulate_disjoint<T>(p + base, q + base, n, f);
                      }
                    });
              }
            });
      });
}

/// divide with its kernels compiled for `isa`.
template <Element T>
void divide_on(Isa isa, std::span<T> data, std::size_t divisor) {
  if (divisor == 0) {
    throw UsageError(-1, "divide", "the divisor is 0",
                     "divide by the number of contributions, which is at least 1");
  }
  T* const p = data.data();
  const std::size_t count = data.size();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        if constexpr (kHalvesInBlocks<kSet, T>) {
          const T* const inputs[] = {p};
          const NarrowMean<T> quotient{static_cast<float>(divisor)};
          reduce_half_blocks<kSet>(p, inputs, 1, count, SumFn{}, quotient);
        } else {
          for_each_block(
              p, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
                divide_block(p + base, n, divisor);
              });
        }
      });
}

}  // namespace strata::detail

namespace strata {

template <Element T>
void reduce_n(std::span<T> out, std::span<const T* const> inputs, ReduceOp op) {
  detail::reduce_n_on<T>(detail::best_isa(), out, inputs, op);
}

template <Element T>
void accumulate(std::span<T> inout, std::span<const T> in, ReduceOp op) {
  detail::accumulate_on<T>(detail::best_isa(), inout, in, op);
}

template <Element T>
void divide(std::span<T> data, std::size_t divisor) {
  detail::divide_on<T>(detail::best_isa(), data, divisor);
}

inline void reduce_n(DataType type, void* out, const void* const* inputs, std::size_t num_inputs,
                     std::size_t count, ReduceOp op) {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::float64)) {
    throw UsageError(-1, "reduce_n",
                     fmt::format("{} is not a DataType value", static_cast<unsigned>(type)),
                     "pass a DataType such as data_type_of<float>");
  }
  if (num_inputs > 0 && inputs == nullptr) {
    throw UsageError(-1, "reduce_n", "the array of input pointers is null",
                     "pass num_inputs pointers to count elements each");
  }
  if (count > 0 && out == nullptr) {
    throw UsageError(-1, "reduce_n", "out is null", "pass an output of count elements");
  }
  visit_data_type(type, [&]<class T>(std::type_identity<T>) {
    // Typed copies of the pointers: reading a `const void*` object as a `const T*` would
    // break aliasing rules.
    constexpr std::size_t kOnStack = 16;
    const T* on_stack[kOnStack];
    std::vector<const T*> on_heap;
    const T** typed = on_stack;
    if (num_inputs > kOnStack) {
      on_heap.resize(num_inputs);
      typed = on_heap.data();
    }
    for (std::size_t j = 0; j < num_inputs; ++j)
      typed[j] = static_cast<const T*>(inputs[j]);
    reduce_n<T>(std::span<T>(static_cast<T*>(out), count),
                std::span<const T* const>(typed, num_inputs), op);
  });
}

}  // namespace strata
