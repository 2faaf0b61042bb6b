// collective_reference/elements.hpp — what the reference needs to know about an element type:
// its bits (results that must be identical compare bit for bit), its exact value in long double,
// its machine epsilon and unit in the last place (the tolerances), and a readable form for
// messages.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>

namespace strata::reference {

/// The unsigned integer with the bits of T (for bit-exact comparisons).
template <Element T>
using Bits = std::conditional_t<
    sizeof(T) == 1, std::uint8_t,
    std::conditional_t<sizeof(T) == 2, std::uint16_t,
                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

template <Element T>
Bits<T> bits_of(T value) noexcept {
  return std::bit_cast<Bits<T>>(value);
}

template <Element T>
bool same_bits(T a, T b) noexcept {
  return bits_of(a) == bits_of(b);
}

/// The exact value of an element in long double (16-bit floats widen exactly through float).
template <Element T>
long double to_long_double(T value) noexcept {
  if constexpr (is_half_precision_v<T>) {
    return static_cast<float>(value);
  } else {
    return static_cast<long double>(value);
  }
}

/// Machine epsilon of a floating element type: 2^-10 for float16, 2^-7 for bfloat16, 2^-23 for
/// float, 2^-52 for double. That of T itself, not of the float that 16-bit types reduce in,
/// because a transport may round every partial result to T.
template <Element T>
constexpr long double epsilon() noexcept {
  if constexpr (std::same_as<T, float16>) {
    return 0x1p-10L;
  } else if constexpr (std::same_as<T, bfloat16>) {
    return 0x1p-7L;
  } else if constexpr (std::same_as<T, float>) {
    return 0x1p-23L;
  } else {
    return 0x1p-52L;
  }
}

/// One unit in the last place of float16 or bfloat16 at `magnitude`, subnormals included
/// (below the smallest normal the spacing stops shrinking, so roundings there are absolute).
template <Element T>
requires is_half_precision_v<T>
long double ulp(long double magnitude) noexcept {
  constexpr int kMantissaBits = std::same_as<T, float16> ? 10 : 7;
  constexpr int kMinExponent = std::same_as<T, float16> ? -14 : -126;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m · 2^exponent, m in [0.5, 1)
  const int binade =
      magnitude == 0 ? kMinExponent : (exponent - 1 > kMinExponent ? exponent - 1 : kMinExponent);
  return std::ldexp(1.0L, binade - kMantissaBits);
}

/// The smallest subnormal of float16 (2^-24) or bfloat16 (2^-133): ulp<T>(0), as a constant.
template <Element T>
requires is_half_precision_v<T>
constexpr long double smallest_subnormal() noexcept {
  return std::same_as<T, float16> ? 0x1p-24L : 0x1p-133L;
}

/// "-3", "0.25", "0.25 (bits 0x3400)": readable and unambiguous.
template <Element T>
std::string format_value(T value) {
  if constexpr (std::is_integral_v<T>) {
    return fmt::format("{}", static_cast<long long>(value));
  } else if constexpr (is_half_precision_v<T>) {
    return fmt::format("{} (bits {:#06x})", static_cast<float>(value), value.bits());
  } else {
    return fmt::format("{}", value);
  }
}

}  // namespace strata::reference
