// Tests for strata/core/bfloat16.hpp: exhaustive over the 65536 bfloat16 values, and float ->
// bfloat16 rounding against an independent reference that picks the nearer of the two
// neighbouring bfloat16 values in double arithmetic (ties to the even one).
#include <strata/core/bfloat16.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::bfloat16;

bool is_nan_bits(std::uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

float float_from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// The value of bfloat16 `b` from its definition (8 exponent bits, bias 127, 7 mantissa bits).
double reference_value(std::uint16_t b) {
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  double magnitude = 0;
  if (exponent == 0xff) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, -133);
  } else {
    magnitude = std::ldexp(128 + mantissa, exponent - 134);
  }
  return (b & 0x8000u) != 0 ? -magnitude : magnitude;
}

// The nearer of the two bfloat16 magnitudes around |value|, ties to the even one. Above the
// largest finite value the upper neighbour is 2^128, which stands for infinity.
std::uint16_t reference_bfloat16_bits(float value) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000u : 0u;
  if (std::isnan(value)) return sign | 0x7fc0u;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isinf(magnitude)) return sign | 0x7f80u;
  // The largest bfloat16 magnitude not above `magnitude`, found by search on values rather
  // than by truncating bits.
  std::uint16_t low = 0, high = 0x7f80;
  while (high - low > 1) {
    const auto middle = static_cast<std::uint16_t>((low + high) / 2);
    if (reference_value(middle) <= magnitude) {
      low = middle;
    } else {
      high = middle;
    }
  }
  const double below = reference_value(low);
  const double above =
      low == 0x7f7f ? 0x1p128 : reference_value(static_cast<std::uint16_t>(low + 1));
  const double to_below = magnitude - below, to_above = above - magnitude;  // exact in double
  std::uint16_t result = low;
  if (to_above < to_below || (to_above == to_below && (low & 1u) != 0)) ++result;
  return sign | result;
}

// A stride over all bit patterns (odd, so every exponent and sign is hit), plus for every
// finite bfloat16 the midpoint to its upper neighbour and the floats either side of it.
std::vector<float> rounding_cases() {
  std::vector<float> cases;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 4097) {
    cases.push_back(float_from_bits(static_cast<std::uint32_t>(bits)));
  }
  for (std::uint32_t b = 0; b <= 0x7f7f; ++b) {
    const std::uint32_t tie = (b << 16) | 0x8000u;  // exactly halfway, as a float
    for (const std::uint32_t bits : {tie, tie - 1, tie + 1}) {
      cases.push_back(float_from_bits(bits));
      cases.push_back(float_from_bits(bits | 0x80000000u));
    }
  }
  return cases;
}

TEST_CASE("bfloat16 -> float is exact for all 65536 values") {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float got = bfloat16::from_bits(b);
    const double want = reference_value(b);
    if (std::isnan(want)) {
      if (!std::isnan(got)) FAIL("bfloat16 " << i << " should widen to NaN");
    } else if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      FAIL("bfloat16 " << i << " widened to " << got << ", want " << want);
    }
  }
}

TEST_CASE("bfloat16 -> float -> bfloat16 is the identity; NaN stays NaN") {
  for (std::uint32_t i = 0; i <= 0xffff; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const std::uint16_t back = bfloat16(static_cast<float>(bfloat16::from_bits(b))).bits();
    if (is_nan_bits(b)) {
      if (!is_nan_bits(back)) FAIL("NaN " << i << " came back as " << back);
      if ((back & 0x8000u) != (b & 0x8000u)) FAIL("NaN sign " << i);
      if ((back & 0x0040u) == 0) FAIL("NaN " << i << " not quieted");
    } else if (back != b) {
      FAIL("bfloat16 " << i << " came back as " << back);
    }
  }
}

TEST_CASE("float -> bfloat16 rounds to nearest even (neighbour reference)") {
  std::size_t checked = 0;
  for (const float f : rounding_cases()) {
    const std::uint16_t got = bfloat16(f).bits();
    const std::uint16_t want = reference_bfloat16_bits(f);
    if (std::isnan(f) ? !is_nan_bits(got) : got != want) {
      FAIL("float bits " << std::bit_cast<std::uint32_t>(f) << ": got " << got << " want " << want);
    }
    ++checked;
  }
  CHECK(checked > 1'000'000);
}

TEST_CASE("float -> bfloat16: hand-checked cases") {
  auto bits = [](std::uint32_t float_bits) { return bfloat16(float_from_bits(float_bits)).bits(); };
  // Ties to even.
  CHECK(bits(0x3f808000u) == 0x3f80);  // 1 + 2^-8: between 0x3f80 (even) and 0x3f81
  CHECK(bits(0x3f818000u) == 0x3f82);  // between 0x3f81 (odd) and 0x3f82
  CHECK(bits(0x3f808001u) == 0x3f81);  // just above the tie
  CHECK(bits(0x3f817fffu) == 0x3f81);  // just below the tie
  CHECK(bits(0x3f80ffffu) == 0x3f81);  // rounding, not truncation
  // The top of the range.
  CHECK(bits(0x7f7f0000u) == 0x7f7f);  // the largest finite bfloat16
  CHECK(bits(0x7f7f7fffu) == 0x7f7f);
  CHECK(bits(0x7f7f8000u) == 0x7f80);  // tie with 2^128; 0x7f7f is odd: infinity
  CHECK(bits(0x7f7fffffu) == 0x7f80);  // FLT_MAX
  CHECK(bits(0xff7fffffu) == 0xff80);
  // Subnormals.
  CHECK(bits(0x00000001u) == 0x0000);
  CHECK(bits(0x00008000u) == 0x0000);  // tie, to even 0
  CHECK(bits(0x00008001u) == 0x0001);
  CHECK(bits(0x00018000u) == 0x0002);  // tie, to even 2
  CHECK(bits(0x007fffffu) == 0x0080);  // the largest float subnormal rounds to the smallest normal
  // Zeros, infinities, NaNs.
  CHECK(bits(0x00000000u) == 0x0000);
  CHECK(bits(0x80000000u) == 0x8000);
  CHECK(bits(0x7f800000u) == 0x7f80);
  CHECK(bits(0xff800000u) == 0xff80);
  CHECK(is_nan_bits(bits(0x7fc00000u)));
  CHECK(is_nan_bits(bits(0x7f800001u)));  // payload only in dropped bits: must not become inf
  CHECK(is_nan_bits(bits(0x7fffffffu)));  // rounding would carry into the sign
  CHECK(bits(0xffffffffu) == 0xffff);
}

TEST_CASE("bfloat16 is a 16-bit trivially copyable storage type, usable in constexpr") {
  static_assert(sizeof(bfloat16) == 2);
  static_assert(std::is_trivially_copyable_v<bfloat16>);
  static_assert(bfloat16(1.0f).bits() == 0x3f80);
  static_assert(static_cast<float>(bfloat16::from_bits(0xc000)) == -2.0f);
}

}  // namespace
