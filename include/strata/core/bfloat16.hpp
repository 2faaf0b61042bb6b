// strata/core/bfloat16.hpp — bfloat16 ("brain float") as a host storage type.
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

/// bfloat16: the upper 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa bits), so it
/// has float's range with about 3 significant decimal digits.
///
/// A storage type: arithmetic happens in float (the conversion to float is implicit and
/// exact). Conversion from float rounds to nearest, ties to even (as CUDA's
/// `__float2bfloat16_rn` and TensorFlow do; not truncation); overflow rounds to infinity, NaN
/// stays NaN (quieted). Layout-compatible with CUDA's `__nv_bfloat16`.
class bfloat16 {
 public:
  bfloat16() = default;
  constexpr explicit bfloat16(float value) noexcept : bits_(from_float(value)) {}

  static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
    bfloat16 b;
    b.bits_ = bits;
    return b;
  }
  constexpr std::uint16_t bits() const noexcept { return bits_; }

  constexpr operator float() const noexcept {  // NOLINT: exact widening
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits_) << 16);
  }

 private:
  static constexpr std::uint16_t from_float(float value) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: rounding could carry it into infinity
      return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
    const std::uint32_t odd = (x >> 16) & 1u;
    return static_cast<std::uint16_t>((x + 0x7fffu + odd) >> 16);
  }

  std::uint16_t bits_;
};

static_assert(sizeof(bfloat16) == 2, "bfloat16 must be exactly 16 bits");

}  // namespace strata
