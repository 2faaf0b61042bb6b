// Tests for benchmarks/perf/check.hpp (strata-perf's data check over the one collective reference
// of tools/reference/, which the conformance tests check strata with): inputs depend on rank,
// index and seed; integer results must be exact with wrap-around; floating-point results pass in
// any reduction order (rank order, reversed, rounded to the type after every step as the TCP ring
// does for half) and fail when they are off by more than the order can explain, or NaN.
//
// The header lives with the benchmark, in strata_perf_core, which these tests link.
#include <perf/check.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <doctest/doctest.h>

#include <strata/core/bfloat16.hpp>
#include <strata/core/float16.hpp>

namespace {

using strata::bfloat16;
using strata::float16;
using strata::ReduceOp;
using strata::perf::DataCheck;

constexpr std::size_t kElements = 2000;

// op over the inputs of `check` at `index`, combined in T (16-bit floats: in float, rounded
// after every step), in rank order or reversed.
template <class T>
T reduce_in_order(const DataCheck<T>& check, std::size_t index, bool reversed) {
  const int n = check.ranks();
  auto at = [&](int k) { return check.input(reversed ? n - 1 - k : k, index); };
  T acc = at(0);
  for (int k = 1; k < n; ++k) {
    const T x = at(k);
    switch (check.op()) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        if constexpr (std::is_integral_v<T>)  // wraps without signed overflow
          acc = static_cast<T>(static_cast<std::uint64_t>(acc) + static_cast<std::uint64_t>(x));
        else
          acc = static_cast<T>(acc + x);
        break;
      case ReduceOp::product:
        if constexpr (std::is_integral_v<T>)
          acc = static_cast<T>(static_cast<std::uint64_t>(acc) * static_cast<std::uint64_t>(x));
        else
          acc = static_cast<T>(acc * x);
        break;
      case ReduceOp::min:
        acc = x < acc ? x : acc;
        break;
      case ReduceOp::max:
        acc = x > acc ? x : acc;
        break;
    }
  }
  if (check.op() == ReduceOp::mean) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <class T>
void check_orders_pass(ReduceOp op, int ranks) {
  const DataCheck<T> check(7, op, ranks);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kElements; ++i) {
    wrong += check.reduced_ok(reduce_in_order(check, i, false), i) ? 0 : 1;
    wrong += check.reduced_ok(reduce_in_order(check, i, true), i) ? 0 : 1;
  }
  CHECK(wrong == 0);
}

TEST_CASE("inputs depend on seed, rank and index, and are reproducible") {
  const DataCheck<float> a(1, ReduceOp::sum, 4);
  const DataCheck<float> b(2, ReduceOp::sum, 4);
  CHECK(a.input(0, 5) == DataCheck<float>(1, ReduceOp::sum, 4).input(0, 5));
  CHECK(a.input(0, 5) != b.input(0, 5));
  CHECK(a.input(0, 5) != a.input(1, 5));
  CHECK(a.input(0, 5) != a.input(0, 6));
  for (std::size_t i = 0; i < kElements; ++i) {
    CHECK(std::fabs(a.input(3, i)) <= 1.0f);
    const float p = DataCheck<float>(1, ReduceOp::product, 4).input(3, i);
    CHECK((p >= 0.875f && p <= 1.125f));  // 1 ± 1/(2n)
  }
  // Products of integers use odd values, so they never become 0.
  const DataCheck<std::int32_t> ints(3, ReduceOp::product, 5);
  for (std::size_t i = 0; i < kElements; ++i)
    CHECK(ints.input(2, i) % 2 != 0);
}

TEST_CASE("integers are exact, with wrap-around") {
  for (ReduceOp op :
       {ReduceOp::sum, ReduceOp::product, ReduceOp::min, ReduceOp::max, ReduceOp::mean}) {
    CAPTURE(op);
    check_orders_pass<std::int8_t>(op, 3);
    check_orders_pass<std::uint8_t>(op, 5);
    check_orders_pass<std::int32_t>(op, 4);
    check_orders_pass<std::int64_t>(op, 2);
  }
  const DataCheck<std::int8_t> check(11, ReduceOp::sum, 3);
  std::size_t wrapped = 0;
  for (std::size_t i = 0; i < kElements; ++i) {
    int wide = 0;
    for (int r = 0; r < 3; ++r)
      wide += check.input(r, i);
    wrapped += (wide < -128 || wide > 127) ? 1 : 0;
    const auto expected = static_cast<std::int8_t>(wide);
    CHECK(check.reduced_ok(expected, i));
    CHECK_FALSE(check.reduced_ok(static_cast<std::int8_t>(expected + 1), i));
  }
  CHECK(wrapped > 0);  // the inputs do exercise wrap-around

  // mean: the wrapped sum divided with truncation toward zero.
  const DataCheck<std::int32_t> mean(5, ReduceOp::mean, 3);
  for (std::size_t i = 0; i < 100; ++i) {
    std::uint32_t sum = 0;
    for (int r = 0; r < 3; ++r)
      sum += static_cast<std::uint32_t>(mean.input(r, i));
    CHECK(mean.reduced_ok(static_cast<std::int32_t>(static_cast<std::int32_t>(sum) / 3), i));
  }
}

TEST_CASE("floating point passes in any order") {
  for (ReduceOp op :
       {ReduceOp::sum, ReduceOp::product, ReduceOp::min, ReduceOp::max, ReduceOp::mean}) {
    CAPTURE(op);
    for (int n : {1, 2, 3, 8}) {
      CAPTURE(n);
      check_orders_pass<float>(op, n);
      check_orders_pass<double>(op, n);
      check_orders_pass<float16>(op, n);
      check_orders_pass<bfloat16>(op, n);
    }
  }
}

TEST_CASE("floating point fails when off by more than the order explains") {
  const DataCheck<float> sum(3, ReduceOp::sum, 4);
  const DataCheck<double> product(3, ReduceOp::product, 4);
  const DataCheck<float16> half(3, ReduceOp::sum, 4);
  std::size_t caught = 0;
  for (std::size_t i = 0; i < kElements; ++i) {
    const float s = reduce_in_order(sum, i, false);
    caught += sum.reduced_ok(s + 1e-3f, i) ? 0 : 1;
    CHECK_FALSE(sum.reduced_ok(std::numeric_limits<float>::quiet_NaN(), i));
    CHECK_FALSE(sum.reduced_ok(-s + 0.5f, i));
    const double p = reduce_in_order(product, i, false);
    CHECK_FALSE(product.reduced_ok(p * (1 + 1e-9), i));
    const float h = reduce_in_order(half, i, false);
    CHECK_FALSE(half.reduced_ok(float16(h + 0.1f), i));
  }
  CHECK(caught == kElements);

  const DataCheck<float> max(3, ReduceOp::max, 4);
  for (std::size_t i = 0; i < 100; ++i) {
    const float m = reduce_in_order(max, i, false);
    CHECK_FALSE(max.reduced_ok(std::nextafter(m, 2.0f), i));
  }
}

TEST_CASE("copies are bit for bit, untouched outputs keep the poison") {
  const DataCheck<double> check(9, ReduceOp::sum, 3);
  CHECK(check.copy_ok(check.input(2, 17), 2, 17));
  CHECK_FALSE(check.copy_ok(check.input(1, 17), 2, 17));
  double poison = 0;
  std::memset(&poison, strata::perf::kPoisonByte, sizeof poison);
  CHECK(DataCheck<double>::untouched(poison));
  CHECK_FALSE(DataCheck<double>::untouched(0.0));
  CHECK_FALSE(check.reduced_ok(poison, 0));  // NaN
  std::int8_t int_poison = 0;
  std::memset(&int_poison, strata::perf::kPoisonByte, 1);
  CHECK(DataCheck<std::int8_t>::untouched(int_poison));
}

}  // namespace
