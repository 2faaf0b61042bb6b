// The block conversions of core/detail/convert_blocks.hpp against the element conversions of
// bfloat16.hpp and float16.hpp, bit for bit: every size from 0 to 40 (the vector loop and its
// tail), and values of every kind (zeros, subnormals, ties, the largest finite values, infinities,
// NaNs, random bits).
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <strata/core/bfloat16.hpp>
#include <strata/core/detail/convert_blocks.hpp>
#include <strata/core/float16.hpp>

namespace {

std::vector<float> values_of_every_kind(std::size_t n, unsigned seed) {
  const float special[] = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.5f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN(),
                           std::bit_cast<float>(0x7fa00001u),  // a signalling NaN
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(),
                           1e-40f,
                           65504.0f,
                           65520.0f,
                           6e-8f,
                           std::bit_cast<float>(0x3f808000u),  // a bfloat16 tie, even below
                           std::bit_cast<float>(0x3f818000u),  // a bfloat16 tie, odd below
                           std::bit_cast<float>(0x7f7fffffu)};
  std::mt19937 random(seed);
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = (random() % 3 == 0) ? special[random() % std::size(special)]
                                    : std::bit_cast<float>(static_cast<std::uint32_t>(random()));
  return values;
}

bool same_bits(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

TEST_CASE_TEMPLATE("16-bit float blocks convert as each element does", Half, strata::bfloat16,
                   strata::float16) {
  for (std::size_t n = 0; n <= 40; ++n) {
    CAPTURE(n);
    for (unsigned seed = 0; seed < 8; ++seed) {
      const auto in = values_of_every_kind(n, seed + 100 * static_cast<unsigned>(n));
      std::vector<Half> narrow(n, Half::from_bits(0x1234));
      strata::detail::narrow(narrow.data(), in.data(), n);
      std::vector<float> wide(n, 7.0f);
      strata::detail::widen(wide.data(), narrow.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        CAPTURE(i);
        CAPTURE(std::bit_cast<std::uint32_t>(in[i]));
        REQUIRE(narrow[i].bits() == Half(in[i]).bits());
        // F16C widens a signalling float16 NaN to a quiet one; every other value to the same
        // bits.
        if (std::isnan(static_cast<float>(narrow[i])))
          REQUIRE(std::isnan(wide[i]));
        else
          REQUIRE(same_bits(wide[i], static_cast<float>(narrow[i])));
        if (std::is_same_v<Half, strata::bfloat16>)
          REQUIRE(same_bits(wide[i], static_cast<float>(narrow[i])));
      }
    }
  }
}
