// Tests for strata/optim/sgd.hpp against hand-derived values and a long-double reference.
#include <strata/optim/sgd.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include "optim_reference.hpp"

namespace optim = strata::optim;

static_assert(optim::Optimizer<optim::Sgd, float>);
static_assert(optim::Optimizer<optim::Sgd, double>);

namespace {

using strata::testing::check_close;
using strata::testing::random_values;

}  // namespace

TEST_CASE_TEMPLATE("Sgd matches hand-derived values for three steps", T, float, double) {
  // lr = 0.5 and gradients that are powers of two keep every intermediate value exact:
  // p0 = {1, -2}; g1 = {0.5, -1}  -> {0.75, -1.5}; g2 = {0.25, 2} -> {0.625, -2.5};
  // g3 = {-1, 0} -> {1.125, -2.5}.
  const optim::Sgd sgd{.learning_rate = 0.5};
  std::vector<T> params{1, -2};
  auto state = optim::make_state<T>(sgd, params.size());
  const std::vector<std::vector<T>> grads{{0.5, -1}, {0.25, 2}, {-1, 0}};
  const std::vector<std::vector<T>> expected{{0.75, -1.5}, {0.625, -2.5}, {1.125, -2.5}};
  for (std::size_t step = 0; step < 3; ++step) {
    sgd.apply(std::span(params), std::span(grads[step]), state);
    CHECK(params == expected[step]);
    CHECK(state.step == static_cast<std::int64_t>(step + 1));
  }

  // Keras' default learning rate 0.01, one step: 1 - 0.01 * 3 = 0.97.
  const optim::Sgd keras_default;
  std::vector<T> p{1};
  const std::vector<T> g{3};
  auto s = optim::make_state<T>(keras_default, 1);
  keras_default.apply(std::span(p), std::span(g), s);
  CHECK(p[0] == doctest::Approx(0.97).epsilon(1e-6));
}

TEST_CASE_TEMPLATE("Sgd matches a long-double reference over 100 steps on random data", T, float,
                   double) {
  const optim::Sgd sgd{.learning_rate = 0.01};
  for (const std::size_t n : {0u, 1u, 7u, 1023u}) {
    CAPTURE(n);
    std::mt19937_64 engine(20240611 + n);
    std::vector<T> params = random_values<T>(n, engine, -1, 1);
    std::vector<long double> reference(params.begin(), params.end());
    auto state = optim::make_state<T>(sgd, n);
    for (int step = 0; step < 100; ++step) {
      const std::vector<T> grads = random_values<T>(n, engine, -1, 1);
      sgd.apply(std::span(params), std::span(grads), state);
      for (std::size_t i = 0; i < n; ++i)
        reference[i] -= 0.01L * static_cast<long double>(grads[i]);
    }
    CHECK(state.step == 100);
    check_close<T>(params, reference);
  }
}

TEST_CASE_TEMPLATE("Sgd converges on a one-dimensional quadratic", T, float, double) {
  // f(p) = (a / 2) (p - c)^2, f'(p) = a (p - c): each step multiplies p - c by 1 - lr a = 0.8.
  constexpr T a = 2, c = 3;
  const optim::Sgd sgd{.learning_rate = 0.1};
  std::vector<T> p{-1};
  auto state = optim::make_state<T>(sgd, 1);
  for (int step = 0; step < 200; ++step) {
    const std::vector<T> g{a * (p[0] - c)};
    sgd.apply(std::span(p), std::span(g), state);
  }
  CHECK(std::fabs(p[0] - c) < T(1e-5));
}

TEST_CASE("Sgd rejects mismatched sizes and bad learning rates, changing nothing") {
  std::vector<float> params{1, 2, 3};
  const std::vector<float> grads{1, 1};
  const std::vector<float> grads3{1, 1, 1};
  optim::Sgd sgd{.learning_rate = 0.1};
  auto state = optim::make_state<float>(sgd, 3);

  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads), state),
                       "strata: optim::Sgd::apply: params has 3 elements but grads has 2; pass "
                       "one gradient per parameter, in the same order",
                       strata::UsageError);

  optim::OptimizerState<float> wrong{{0.0f}, 0};
  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads3), wrong),
                       "strata: optim::Sgd::apply: state has 1 slot values but 3 parameters "
                       "need 0 x 3 = 0; create the state with make_state<T>(optimizer, "
                       "params.size()) for these parameters",
                       strata::UsageError);

  sgd.learning_rate = -0.1;
  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads3), state),
                       "strata: optim::Sgd::apply: learning_rate is -0.1, but it must be finite "
                       "and >= 0; fix the learning_rate field of the optimizer",
                       strata::UsageError);
  sgd.learning_rate = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads3), state),
                       doctest::Contains("learning_rate is nan"), strata::UsageError);
  sgd.learning_rate = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads3), state),
                       doctest::Contains("learning_rate is inf"), strata::UsageError);

  state.step = -1;
  sgd.learning_rate = 0.1;
  CHECK_THROWS_WITH_AS(sgd.apply(std::span(params), std::span(grads3), state),
                       doctest::Contains("optim::Sgd::apply: state.step is -1"),
                       strata::UsageError);
  state.step = 0;

  CHECK(params == std::vector<float>{1, 2, 3});
  CHECK(state.step == 0);

  // A zero learning rate is allowed and changes nothing but the step count.
  sgd.learning_rate = 0;
  sgd.apply(std::span(params), std::span(grads3), state);
  CHECK(params == std::vector<float>{1, 2, 3});
  CHECK(state.step == 1);
}
