// Tests for strata/optim/adam.hpp against hand-derived values and a long-double reference.
#include <strata/optim/adam.hpp>

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

static_assert(optim::Optimizer<optim::Adam, float>);
static_assert(optim::Optimizer<optim::Adam, double>);

namespace {

using strata::testing::check_close;
using strata::testing::random_values;

}  // namespace

TEST_CASE_TEMPLATE("Adam matches hand-derived values for three steps", T, float, double) {
  // lr = 0.1, beta1 = 0.9, beta2 = 0.999. Element 0 starts at 1 with g = 1, -1, 2.
  // With epsilon = 0:
  //   t = 1: m = 0.1, v = 0.001, lr_t = 0.1 sqrt(0.001) / 0.1, so the step is lr sign(g):
  //          p = 0.9.
  //   t = 2: m = 0.09 - 0.1 = -0.01, v = 0.000999 + 0.001 = 0.001999 = 1 - 0.999^2, so
  //          lr_t m / sqrt(v) = 0.1 (-0.01) / (1 - 0.81) = -0.1 / 19: p = 0.9 + 0.1 / 19.
  //   t = 3: m = 0.191, v = 0.005997001, 1 - beta2^3 = 0.002997001, 1 - beta1^3 = 0.271:
  //          p -= 0.1 (0.191 / 0.271) sqrt(0.002997001 / 0.005997001).
  // Element 1 starts at -2 with g = -3, 0.5, 0.25. The constants were evaluated from these
  // expressions with 40-digit decimal arithmetic (Python's decimal module).
  struct Case {
    double epsilon;
    double expected[3][2];
  };
  const Case cases[] = {
      {0.0,
       {{0.9, -1.9},
        {0.9052631578947368421, -1.846146244807133301},
        {0.8554389434998115140, -1.809895839151112958}}},
      {1e-7,
       {{0.9000003162267660200, -1.900000105409144228},
        {0.9052634623498070636, -1.846146406237948039},
        {0.8554393122936642147, -1.809896038183415999}}},
  };
  const T grads[3][2] = {{1, -3}, {-1, 0.5}, {2, 0.25}};
  for (const Case& c : cases) {
    CAPTURE(c.epsilon);
    const optim::Adam adam{.learning_rate = 0.1, .epsilon = c.epsilon};
    std::vector<T> p{1, -2};
    auto state = optim::make_state<T>(adam, 2);
    for (std::size_t step = 0; step < 3; ++step) {
      const std::vector<T> g{grads[step][0], grads[step][1]};
      adam.apply(std::span(p), std::span(g), state);
      const double eps = std::same_as<T, float> ? 1e-6 : 1e-14;
      CHECK(p[0] == doctest::Approx(c.expected[step][0]).epsilon(eps));
      CHECK(p[1] == doctest::Approx(c.expected[step][1]).epsilon(eps));
      CHECK(state.step == static_cast<std::int64_t>(step + 1));
    }
    // Slot layout: m of both elements, then v of both elements.
    CHECK(state.slots[0] == doctest::Approx(0.191));
    CHECK(state.slots[1] == doctest::Approx(0.9 * (0.9 * -0.3 + 0.05) + 0.025));
    CHECK(state.slots[2] == doctest::Approx(0.005997001));
    CHECK(state.slots[3] ==
          doctest::Approx(0.999 * (0.999 * 0.009 + 0.00025) + 0.0000625).epsilon(1e-5));
  }
}

TEST_CASE_TEMPLATE("Adam matches a long-double reference over 100 steps on random data", T, float,
                   double) {
  const optim::Adam adam{.learning_rate = 0.01};
  for (const std::size_t n : {0u, 1u, 7u, 1023u}) {
    CAPTURE(n);
    std::mt19937_64 engine(99 + n);
    std::vector<T> params = random_values<T>(n, engine, -1, 1);
    std::vector<long double> reference(params.begin(), params.end());
    std::vector<long double> m(n, 0.0L), v(n, 0.0L);
    auto state = optim::make_state<T>(adam, n);
    for (int step = 1; step <= 100; ++step) {
      const std::vector<T> grads = random_values<T>(n, engine, -1, 1);
      adam.apply(std::span(params), std::span(grads), state);
      const long double lr_t =
          0.01L * std::sqrt(1.0L - std::pow(0.999L, step)) / (1.0L - std::pow(0.9L, step));
      for (std::size_t i = 0; i < n; ++i) {
        const long double g = grads[i];
        m[i] = 0.9L * m[i] + 0.1L * g;
        v[i] = 0.999L * v[i] + 0.001L * g * g;
        reference[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7L);
      }
    }
    CHECK(state.step == 100);
    check_close<T>(params, reference);
    check_close<T>(std::span<const T>(state.slots).first(n), m);
    check_close<T>(std::span<const T>(state.slots).subspan(n), v);
  }
}

TEST_CASE_TEMPLATE("Adam converges on a one-dimensional quadratic", T, float, double) {
  // f(p) = (a / 2) (p - c)^2. Adam's steps are about lr in size, so it walks to c and then
  // settles as the moment estimates shrink with the gradient.
  constexpr T a = 2, c = 3;
  const optim::Adam adam{.learning_rate = 0.05};
  std::vector<T> p{-1};
  auto state = optim::make_state<T>(adam, 1);
  for (int step = 0; step < 2000; ++step) {
    const std::vector<T> g{a * (p[0] - c)};
    adam.apply(std::span(p), std::span(g), state);
  }
  CHECK(std::fabs(p[0] - c) < T(1e-3));
}

TEST_CASE("Adam with a zero learning rate moves nothing but its moments") {
  const optim::Adam adam{.learning_rate = 0};
  std::vector<float> p{1, 2};
  const std::vector<float> g{0.5f, -0.5f};
  auto state = optim::make_state<float>(adam, 2);
  adam.apply(std::span(p), std::span(g), state);
  CHECK(p == std::vector<float>{1, 2});
  CHECK(state.slots[0] == doctest::Approx(0.05));
  CHECK(state.slots[2] == doctest::Approx(0.00025));
}

TEST_CASE("Adam rejects bad sizes and hyperparameters, changing nothing") {
  std::vector<float> params(7, 1.0f);
  const std::vector<float> grads(7, 1.0f);
  optim::Adam adam;
  auto state = optim::make_state<float>(adam, 7);
  state.slots.pop_back();

  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       "strata: optim::Adam::apply: state has 13 slot values but 7 parameters "
                       "need 2 x 7 = 14; create the state with make_state<T>(optimizer, "
                       "params.size()) for these parameters",
                       strata::UsageError);
  state = optim::make_state<float>(adam, 7);
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads).first(3), state),
                       "strata: optim::Adam::apply: params has 7 elements but grads has 3; "
                       "pass one gradient per parameter, in the same order",
                       strata::UsageError);

  adam.beta1 = 1.0;
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       "strata: optim::Adam::apply: beta1 is 1, but it must be in [0, 1); fix "
                       "the beta1 field of the optimizer",
                       strata::UsageError);
  adam.beta1 = 0.9;
  adam.beta2 = -0.5;
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       doctest::Contains("optim::Adam::apply: beta2 is -0.5"), strata::UsageError);
  adam.beta2 = 0.999;
  adam.epsilon = -1e-8;
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       doctest::Contains("optim::Adam::apply: epsilon is -1e-08, but it must be "
                                         "finite and >= 0"),
                       strata::UsageError);
  adam.epsilon = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(adam.apply(std::span(params), std::span(grads), state), strata::UsageError);
  adam.epsilon = 1e-7;
  adam.learning_rate = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       "strata: optim::Adam::apply: learning_rate is nan, but it must be finite "
                       "and >= 0; fix the learning_rate field of the optimizer",
                       strata::UsageError);
  adam.learning_rate = 0.01;
  // The largest step, whose bias correction is computed before the sizes are checked: a usage
  // error, not an overflow (UBSan would stop here).
  state.step = std::numeric_limits<std::int64_t>::max();
  CHECK_THROWS_WITH_AS(adam.apply(std::span(params), std::span(grads), state),
                       doctest::Contains("optim::Adam::apply: state.step is 9223372036854775807"),
                       strata::UsageError);
  state.step = 0;

  CHECK(params == std::vector<float>(7, 1.0f));
  CHECK(state.slots == std::vector<float>(14, 0.0f));
  CHECK(state.step == 0);
}
