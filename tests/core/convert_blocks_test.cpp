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

TEST_CASE_TEMPLATE(
    "16-bit float blocks of megabytes, at every alignment, convert as each element "
    "does",
    Half, strata::bfloat16, strata::float16) {
  // Above kStreamingBytes the conversions store past the cache, from the first aligned element;
  // half of the values are a gradient's (no subnormals: whole blocks convert at once), half of
  // every kind.
  const std::size_t n = strata::detail::kStreamingBytes / sizeof(Half) + 1037;
  auto values = values_of_every_kind(n / 2, 7);
  std::mt19937 random(11);
  std::normal_distribution<float> gradient(0.0f, 1e-3f);
  while (values.size() < n + 3)
    values.push_back(gradient(random));
  for (std::size_t offset = 0; offset < 4; ++offset) {
    CAPTURE(offset);
    const float* in = values.data() + offset;
    std::vector<Half> narrow(n + offset);
    strata::detail::narrow(narrow.data() + offset, in, n);
    std::vector<float> wide(n + offset);
    strata::detail::widen(wide.data() + offset, narrow.data() + offset, n);
    std::size_t narrowed_wrong = 0;
    std::size_t widened_wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const Half half = narrow[offset + i];
      narrowed_wrong += half.bits() != Half(in[i]).bits();
      const float want = static_cast<float>(half);
      widened_wrong +=
          std::isnan(want) ? !std::isnan(wide[offset + i]) : !same_bits(wide[offset + i], want);
    }
    CHECK(narrowed_wrong == 0);
    CHECK(widened_wrong == 0);
  }
}

#if STRATA_REDUCE_DISPATCH
TEST_CASE("bfloat16 narrows alike through every conversion this CPU runs") {
  // narrow() picks one; the others run on the CPUs of other users.
  if (strata::detail::best_isa() == strata::detail::Isa::baseline) return;
  using Narrow = void (*)(strata::bfloat16*, const float*, std::size_t) noexcept;
  std::vector<Narrow> conversions{strata::detail::narrow_bfloat16_avx2};
  if (strata::detail::has_avx512_bf16())
    conversions.push_back(strata::detail::narrow_bfloat16_avx512_bf16);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{33},
                              std::size_t{1021}, strata::detail::kStreamingBytes / 2 + 5}) {
    CAPTURE(n);
    const auto in = values_of_every_kind(n, static_cast<unsigned>(n));
    for (std::size_t c = 0; c < conversions.size(); ++c) {
      CAPTURE(c);
      std::vector<strata::bfloat16> out(n + 1);
      conversions[c](out.data() + 1, in.data(), n);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i)
        wrong += out[i + 1].bits() != strata::bfloat16(in[i]).bits();
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("bfloat16 widens alike through every conversion this CPU runs") {
  using strata::detail::Isa;
  if (strata::detail::best_isa() == Isa::baseline) return;
  using Widen = void (*)(float*, const strata::bfloat16*, std::size_t) noexcept;
  std::vector<Widen> conversions{strata::detail::widen_bfloat16_avx2};
  if (strata::detail::best_isa() == Isa::avx512)
    conversions.push_back(strata::detail::widen_bfloat16_avx512);
  // Every bit pattern, through each tail length and past kStreamingBytes.
  std::vector<strata::bfloat16> in(std::size_t{1} << 16);
  for (std::size_t h = 0; h < in.size(); ++h)
    in[h] = strata::bfloat16::from_bits(static_cast<std::uint16_t>(h));
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{17},
                              std::size_t{1021}, in.size() - 3}) {
    CAPTURE(n);
    for (std::size_t c = 0; c < conversions.size(); ++c) {
      CAPTURE(c);
      std::vector<float> out(n + 1, 7.0f);
      conversions[c](out.data() + 1, in.data(), n);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i)
        wrong += !same_bits(out[i + 1], static_cast<float>(in[i]));
      CHECK(wrong == 0);
      CHECK(out[0] == 7.0f);
    }
  }
}
#endif
