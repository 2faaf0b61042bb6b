// Tests for strata/core/float16.hpp: exhaustive over the 65536 half values, and float -> half
// rounding against two independent references: arithmetic on doubles (everywhere) and the
// compiler's own _Float16 conversion (where it exists, e.g. g++ 12 on x86-64).
#include <strata/core/float16.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::float16;

bool is_nan_bits(std::uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

float float_from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// The value of half `h` from the definition of binary16, in double.
double reference_value(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude = 0;
  if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -24);
  } else {
    magnitude = std::ldexp(1024 + mantissa, exponent - 25);
  }
  return (h & 0x8000u) != 0 ? -magnitude : magnitude;
}

// Rounds `value` to binary16 by arithmetic rather than bit manipulation: scale the magnitude so
// that the half's last place is 1, let nearbyint round it (to nearest, ties to even, the
// default mode), and rebuild the bits. NaN maps to the canonical quiet NaN.
std::uint16_t reference_half_bits(float value) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  if (std::isnan(value)) return sign | 0x7e00u;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isinf(magnitude)) return sign | 0x7c00u;
  if (magnitude < 0x1p-14) {
    // Subnormal steps of 2^-24; rounding up to 1024 steps gives the smallest normal, 0x0400.
    return static_cast<std::uint16_t>(sign |
                                      static_cast<unsigned>(std::nearbyint(magnitude * 0x1p24)));
  }
  int e = 0;
  std::frexp(magnitude, &e);  // magnitude in [2^(e-1), 2^e)
  int exponent = e - 1;
  double significand = std::nearbyint(std::ldexp(magnitude, 10 - exponent));  // [1024, 2048]
  if (significand == 2048) {
    significand = 1024;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7c00u;
  return static_cast<std::uint16_t>(sign | ((exponent + 15) << 10) |
                                    (static_cast<unsigned>(significand) - 1024u));
}

// Floats that exercise rounding: a stride over all bit patterns (odd, so every exponent and
// sign is hit), and for every finite half the midpoint to its upper neighbour (the tie) and
// the floats just either side of it, with both signs.
std::vector<float> rounding_cases() {
  std::vector<float> cases;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 4097) {
    cases.push_back(float_from_bits(static_cast<std::uint32_t>(bits)));
  }
  for (std::uint16_t h = 0; h <= 0x7bff; ++h) {
    const double low = reference_value(h);
    const double high = h == 0x7bff ? 65536.0 : reference_value(static_cast<std::uint16_t>(h + 1));
    const auto tie = static_cast<float>((low + high) / 2);  // 12 significant bits: exact
    for (const float f : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e9f)}) {
      cases.push_back(f);
      cases.push_back(-f);
    }
  }
  return cases;
}

TEST_CASE("half -> float is exact for all 65536 values") {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float got = float16::from_bits(h);
    const double want = reference_value(h);
    if (std::isnan(want)) {
      if (!std::isnan(got)) FAIL("half " << i << " should widen to NaN");
      // The payload survives widening (the conversion is exact, as documented).
      if ((std::bit_cast<std::uint32_t>(got) >> 13 & 0x3ffu) != (h & 0x3ffu)) FAIL("payload " << i);
    } else if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      FAIL("half " << i << " widened to " << got << ", want " << want);
    }
  }
}

TEST_CASE("half -> float -> half is the identity; NaN stays NaN") {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const std::uint16_t back = float16(static_cast<float>(float16::from_bits(h))).bits();
    if (is_nan_bits(h)) {
      if (!is_nan_bits(back)) FAIL("NaN " << i << " came back as " << back);
      if ((back & 0x8000u) != (h & 0x8000u)) FAIL("NaN sign " << i);
      if ((back & 0x0200u) == 0) FAIL("NaN " << i << " not quieted");
    } else if (back != h) {
      FAIL("half " << i << " came back as " << back);
    }
  }
}

TEST_CASE("float -> half rounds to nearest even (double-arithmetic reference)") {
  std::size_t checked = 0;
  for (const float f : rounding_cases()) {
    const std::uint16_t got = float16(f).bits();
    const std::uint16_t want = reference_half_bits(f);
    if (std::isnan(f) ? !is_nan_bits(got) : got != want) {
      FAIL("float bits " << std::bit_cast<std::uint32_t>(f) << ": got " << got << " want " << want);
    }
    ++checked;
  }
  CHECK(checked > 1'000'000);
}

#ifdef __FLT16_MAX__
TEST_CASE("float16 agrees with the compiler's _Float16") {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float want = static_cast<float>(std::bit_cast<_Float16>(h));
    const float got = float16::from_bits(h);
    if (std::isnan(want)
            ? !std::isnan(got)
            : std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
      FAIL("half " << i);
    }
  }
  for (const float f : rounding_cases()) {
    const auto want = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    const std::uint16_t got = float16(f).bits();
    if (std::isnan(f) ? !is_nan_bits(got) : got != want) {
      FAIL("float bits " << std::bit_cast<std::uint32_t>(f) << ": got " << got << " want " << want);
    }
  }
}
#endif

TEST_CASE("float -> half: hand-checked cases") {
  auto bits = [](float f) { return float16(f).bits(); };
  // Ties to even: 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10 (odd).
  CHECK(bits(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(bits(1.0f + 3 * 0x1p-11f) == 0x3c02);         // halfway between 0x3c01 (odd) and 0x3c02
  CHECK(bits(1.0f + 0x1p-11f + 0x1p-23f) == 0x3c01);  // just above the tie
  // The top of the range.
  CHECK(bits(65504.0f) == 0x7bff);
  CHECK(bits(65519.99f) == 0x7bff);
  CHECK(bits(65520.0f) == 0x7c00);  // the tie with 65536 rounds to even: infinity
  CHECK(bits(-65520.0f) == 0xfc00);
  CHECK(bits(1e10f) == 0x7c00);
  // Subnormals.
  CHECK(bits(0x1p-24f) == 0x0001);      // the smallest subnormal
  CHECK(bits(0x1p-25f) == 0x0000);      // half of it: a tie, to even 0
  CHECK(bits(3 * 0x1p-26f) == 0x0001);  // 0.75 of it rounds up
  CHECK(bits(3 * 0x1p-25f) == 0x0002);  // 1.5 of it: a tie, to even 2
  CHECK(bits(0x1p-26f) == 0x0000);
  CHECK(bits(-0x1p-24f) == 0x8001);
  CHECK(bits(1023 * 0x1p-24f) == 0x03ff);      // the largest subnormal
  CHECK(bits(0x1p-14f - 0x1p-25f) == 0x0400);  // tie between 0x03ff and 0x0400: to even
  CHECK(bits(0x1p-14f) == 0x0400);             // the smallest normal
  CHECK(bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  // Zeros, infinities, NaNs.
  CHECK(bits(0.0f) == 0x0000);
  CHECK(bits(-0.0f) == 0x8000);
  CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(is_nan_bits(bits(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_nan_bits(bits(float_from_bits(0x7f800001u))));  // payload only in dropped bits
  CHECK(bits(float_from_bits(0xff800001u)) == 0xfe00);     // quiet NaN, sign kept
  CHECK(is_nan_bits(bits(float_from_bits(0xffffffffu))));
  // Widening of the special values.
  CHECK(static_cast<float>(float16::from_bits(0x7bff)) == 65504.0f);
  CHECK(static_cast<float>(float16::from_bits(0x0001)) == 0x1p-24f);
  CHECK(std::isinf(static_cast<float>(float16::from_bits(0xfc00))));
  CHECK(std::signbit(static_cast<float>(float16::from_bits(0x8000))));
}

TEST_CASE("float16 is a 16-bit trivially copyable storage type, usable in constexpr") {
  static_assert(sizeof(float16) == 2);
  static_assert(std::is_trivially_copyable_v<float16>);
  static_assert(float16(1.0f).bits() == 0x3c00);
  static_assert(static_cast<float>(float16::from_bits(0xc000)) == -2.0f);
  static_assert(float16(0x1p-25f).bits() == 0);
}

}  // namespace
