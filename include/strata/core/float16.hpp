// strata/core/float16.hpp — IEEE 754 binary16 ("half") as a host storage type.
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

/// IEEE 754 binary16: 1 sign bit, 5 exponent bits, 10 mantissa bits; range ±65504.
///
/// A storage type: arithmetic happens in float (the conversion to float is implicit and
/// exact). Conversion from float rounds to nearest, ties to even, like the hardware (F16C's
/// `vcvtps2ph` with rounding mode 0 and CUDA's `__float2half_rn`): values of 65520 and above in
/// magnitude become infinity, subnormals are produced and kept, NaN stays NaN (quieted). The
/// layout is the 16 bits alone, so spans of float16 can be handed to CUDA or NCCL as `__half`.
class float16 {
 public:
  float16() = default;
  constexpr explicit float16(float value) noexcept : bits_(from_float(value)) {}

  static constexpr float16 from_bits(std::uint16_t bits) noexcept {
    float16 h;
    h.bits_ = bits;
    return h;
  }
  constexpr std::uint16_t bits() const noexcept { return bits_; }

  constexpr operator float() const noexcept { return to_float(bits_); }  // NOLINT: exact widening

 private:
  static constexpr std::uint16_t from_float(float value) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t magnitude = x & 0x7fffffffu;
    if (magnitude > 0x7f800000u)  // NaN: keep the top payload bits, force quiet
      return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
    if (magnitude >= 0x477ff000u)  // >= 65520 rounds (ties to even) past 65504: infinity
      return static_cast<std::uint16_t>(sign | 0x7c00u);
    if (magnitude < 0x38800000u) {
      // Below 2^-14 the result is subnormal. 0.5f has an ulp of 2^-24, the half subnormal step,
      // so the FPU's own round-to-nearest-even does the rounding in this addition.
      const float shifted = std::bit_cast<float>(magnitude) + 0.5f;
      return static_cast<std::uint16_t>(sign |
                                        (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
    const std::uint32_t odd = (magnitude >> 13) & 1u;
    return static_cast<std::uint16_t>(sign | ((magnitude - 0x38000000u + 0xfffu + odd) >> 13));
  }

  static constexpr float to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1fu;
    const std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
      // Subnormal or zero: mantissa * 2^-24 is exact in float.
      const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
      return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }

  std::uint16_t bits_;
};

static_assert(sizeof(float16) == 2, "float16 must be exactly the 16 bits of binary16");

}  // namespace strata
