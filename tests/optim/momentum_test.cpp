// Tests for strata/optim/momentum.hpp against hand-derived values and a long-double reference.
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>

#include <algorithm>
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

static_assert(optim::Optimizer<optim::Momentum, float>);
static_assert(optim::Optimizer<optim::Momentum, double>);

namespace {

using strata::testing::check_close;
using strata::testing::random_values;

}  // namespace

TEST_CASE_TEMPLATE("Momentum matches hand-derived values for three steps", T, float, double) {
  // lr = momentum = 0.5 keep every value exact. p0 = 1, g = 1, 1, -2.
  //   plain:    v = -0.5, -0.75, 0.625;   p = 0.5, -0.25, 0.375
  //   nesterov: p += 0.5 v - 0.5 g:       p = 0.25, -0.625, 0.6875
  const std::vector<T> grads{1, 1, -2};
  for (const bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    const optim::Momentum opt{.learning_rate = 0.5, .momentum = 0.5, .nesterov = nesterov};
    std::vector<T> p{1};
    auto state = optim::make_state<T>(opt, 1);
    const std::vector<T> velocity{-0.5, -0.75, 0.625};
    const std::vector<T> expected =
        nesterov ? std::vector<T>{0.25, -0.625, 0.6875} : std::vector<T>{0.5, -0.25, 0.375};
    for (std::size_t step = 0; step < 3; ++step) {
      const std::vector<T> g{grads[step]};
      opt.apply(std::span(p), std::span(g), state);
      CHECK(p[0] == expected[step]);
      CHECK(state.slots[0] == velocity[step]);
      CHECK(state.step == static_cast<std::int64_t>(step + 1));
    }
  }

  // Keras-like values: lr 0.1, momentum 0.9, p0 = 1, g = 1 every step:
  //   v = -0.1, -0.19, -0.271; p = 0.9, 0.71, 0.439.
  const optim::Momentum keras{.learning_rate = 0.1, .momentum = 0.9};
  std::vector<T> p{1};
  const std::vector<T> g{1};
  auto state = optim::make_state<T>(keras, 1);
  const double expected[] = {0.9, 0.71, 0.439};
  for (const double e : expected) {
    keras.apply(std::span(p), std::span(g), state);
    CHECK(p[0] == doctest::Approx(e).epsilon(1e-6));
  }
  CHECK(state.slots[0] == doctest::Approx(-0.271).epsilon(1e-6));
}

TEST_CASE_TEMPLATE("Momentum matches a long-double reference over 100 steps on random data", T,
                   float, double) {
  for (const bool nesterov : {false, true}) {
    const optim::Momentum opt{.learning_rate = 0.01, .momentum = 0.9, .nesterov = nesterov};
    for (const std::size_t n : {0u, 1u, 7u, 1023u}) {
      CAPTURE(nesterov);
      CAPTURE(n);
      std::mt19937_64 engine(777 + n);
      std::vector<T> params = random_values<T>(n, engine, -1, 1);
      std::vector<long double> reference(params.begin(), params.end());
      std::vector<long double> velocity(n, 0.0L);
      auto state = optim::make_state<T>(opt, n);
      for (int step = 0; step < 100; ++step) {
        const std::vector<T> grads = random_values<T>(n, engine, -1, 1);
        opt.apply(std::span(params), std::span(grads), state);
        for (std::size_t i = 0; i < n; ++i) {
          const long double g = grads[i];
          velocity[i] = 0.9L * velocity[i] - 0.01L * g;
          reference[i] += nesterov ? 0.9L * velocity[i] - 0.01L * g : velocity[i];
        }
      }
      CHECK(state.step == 100);
      check_close<T>(params, reference);
      check_close<T>(state.slots, velocity);
    }
  }
}

TEST_CASE_TEMPLATE("Momentum with momentum 0 is bit for bit Sgd", T, float, double) {
  std::mt19937_64 engine(5);
  std::vector<T> a = random_values<T>(1023, engine, -1, 1);
  std::vector<T> b = a;
  const optim::Momentum momentum{.learning_rate = 0.03, .momentum = 0.0};
  const optim::Sgd sgd{.learning_rate = 0.03};
  auto sa = optim::make_state<T>(momentum, a.size());
  auto sb = optim::make_state<T>(sgd, b.size());
  for (int step = 0; step < 10; ++step) {
    const std::vector<T> grads = random_values<T>(a.size(), engine, -1, 1);
    momentum.apply(std::span(a), std::span(grads), sa);
    sgd.apply(std::span(b), std::span(grads), sb);
  }
  CHECK(a == b);
}

TEST_CASE_TEMPLATE("Momentum converges on a one-dimensional quadratic", T, float, double) {
  // f(p) = (a / 2) (p - c)^2; heavy ball with lr a = 0.2 and momentum 0.9 contracts by about
  // sqrt(0.9) per step.
  constexpr T a = 2, c = 3;
  for (const bool nesterov : {false, true}) {
    CAPTURE(nesterov);
    const optim::Momentum opt{.learning_rate = 0.1, .momentum = 0.9, .nesterov = nesterov};
    std::vector<T> p{-1};
    auto state = optim::make_state<T>(opt, 1);
    for (int step = 0; step < 500; ++step) {
      const std::vector<T> g{a * (p[0] - c)};
      opt.apply(std::span(p), std::span(g), state);
    }
    CHECK(std::fabs(p[0] - c) < T(1e-4));
  }
}

TEST_CASE("Momentum rejects bad sizes and hyperparameters, changing nothing") {
  std::vector<double> params(7, 1.0);
  const std::vector<double> grads(7, 1.0);
  const std::vector<double> grads6(6, 1.0);
  optim::Momentum opt{.learning_rate = 0.1};
  auto state = optim::make_state<double>(opt, 7);

  CHECK_THROWS_WITH_AS(opt.apply(std::span(params), std::span(grads6), state),
                       "strata: optim::Momentum::apply: params has 7 elements but grads has 6; "
                       "pass one gradient per parameter, in the same order",
                       strata::UsageError);
  auto short_state = optim::make_state<double>(opt, 6);
  CHECK_THROWS_WITH_AS(opt.apply(std::span(params), std::span(grads), short_state),
                       "strata: optim::Momentum::apply: state has 6 slot values but 7 "
                       "parameters need 1 x 7 = 7; create the state with "
                       "make_state<T>(optimizer, params.size()) for these parameters",
                       strata::UsageError);

  opt.momentum = 1.5;
  CHECK_THROWS_WITH_AS(opt.apply(std::span(params), std::span(grads), state),
                       "strata: optim::Momentum::apply: momentum is 1.5, but it must be in [0, "
                       "1]; fix the momentum field of the optimizer",
                       strata::UsageError);
  opt.momentum = -0.1;
  CHECK_THROWS_AS(opt.apply(std::span(params), std::span(grads), state), strata::UsageError);
  opt.momentum = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(opt.apply(std::span(params), std::span(grads), state), strata::UsageError);
  opt.momentum = 0.9;
  opt.learning_rate = -1;
  CHECK_THROWS_WITH_AS(opt.apply(std::span(params), std::span(grads), state),
                       doctest::Contains("optim::Momentum::apply: learning_rate is -1"),
                       strata::UsageError);

  CHECK(params == std::vector<double>(7, 1.0));
  CHECK(state.slots == std::vector<double>(7, 0.0));
  CHECK(state.step == 0);

  opt.learning_rate = 0.1;
  opt.momentum = 1.0;  // the closed bound is allowed, as in Keras
  CHECK_NOTHROW(opt.apply(std::span(params), std::span(grads), state));
}
