// Shared by the optimizer tests: reproducible random data and the comparison with a long
// double reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <random>
#include <span>
#include <vector>

#include <doctest/doctest.h>

namespace strata::testing {

// Uniform values in [lo, hi) from a fully specified engine (mt19937_64's sequence is fixed by
// the standard; the conversion to floating point is ours), so the data are the same everywhere.
template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937_64& engine, double lo, double hi) {
  std::vector<T> values(n);
  for (T& x : values)
    x = static_cast<T>(lo + (hi - lo) * static_cast<double>(engine() >> 11) * 0x1p-53);
  return values;
}

template <class T>
constexpr double kOptimizerTolerance = std::same_as<T, float> ? 2e-5 : 1e-13;

template <class T>
void check_close(std::span<const T> actual, std::span<const long double> expected) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const long double scale = std::max(1.0L, std::fabs(expected[i]));
    INFO("element " << i << ": " << actual[i] << " vs " << static_cast<double>(expected[i]));
    CHECK(std::fabs(static_cast<long double>(actual[i]) - expected[i]) <=
          kOptimizerTolerance<T> * scale);
  }
}

}  // namespace strata::testing
