// strata/core/detail/reduce_convert.hpp — the kernels' conversions between an element and the
// type it is combined in (float for float16 and bfloat16).
#pragma once

#include <bit>
#include <concepts>
#include <cstdint>
#include <type_traits>

#include <strata/core/bfloat16.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/float16.hpp>

namespace strata::detail {

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

}  // namespace strata::detail
