// Tests for strata/optim/optimizer.hpp: the Optimizer concept, its near-misses, make_state.
#include <strata/optim/optimizer.hpp>

#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>

#include <cstddef>
#include <limits>
#include <span>

#include <doctest/doctest.h>

namespace optim = strata::optim;

// Named (not anonymous) so that the declared-only kSlots below has external linkage.
namespace optimizer_test {

// The smallest model: no slots, does nothing.
struct Archetype {
  static constexpr std::size_t kSlots = 0;
  template <class T>
  void apply(std::span<T>, std::span<const T>, optim::OptimizerState<T>&) const {}
};

// Near-misses, each breaking one requirement.
struct NoSlots {
  template <class T>
  void apply(std::span<T>, std::span<const T>, optim::OptimizerState<T>&) const {}
};
struct SlotsNotSizeT {
  static constexpr int kSlots = 1;
  template <class T>
  void apply(std::span<T>, std::span<const T>, optim::OptimizerState<T>&) const {}
};
struct SlotsNotConstant {
  static const std::size_t kSlots;  // declared only: not usable in constant expressions
  template <class T>
  void apply(std::span<T>, std::span<const T>, optim::OptimizerState<T>&) const {}
};
struct MutatingApply {
  static constexpr std::size_t kSlots = 0;
  template <class T>
  void apply(std::span<T>, std::span<const T>, optim::OptimizerState<T>&) {}  // not const
};
struct FloatOnly {
  static constexpr std::size_t kSlots = 0;
  void apply(std::span<float>, std::span<const float>, optim::OptimizerState<float>&) const {}
};
struct NoApply {
  static constexpr std::size_t kSlots = 0;
};

}  // namespace optimizer_test

using namespace optimizer_test;

static_assert(optim::Optimizer<Archetype, float>);
static_assert(optim::Optimizer<Archetype, double>);
static_assert(optim::Optimizer<optim::Sgd, float>);
static_assert(optim::Optimizer<optim::Momentum, float>);
static_assert(optim::Optimizer<optim::Adam, float>);
static_assert(optim::Optimizer<optim::Sgd, double>);
static_assert(optim::Optimizer<optim::Momentum, double>);
static_assert(optim::Optimizer<optim::Adam, double>);
static_assert(optim::Optimizer<optim::Adam, long double>);

static_assert(!optim::Optimizer<NoSlots, float>);
static_assert(!optim::Optimizer<SlotsNotSizeT, float>);
static_assert(!optim::Optimizer<SlotsNotConstant, float>);
static_assert(!optim::Optimizer<MutatingApply, float>);
static_assert(!optim::Optimizer<NoApply, float>);
static_assert(optim::Optimizer<FloatOnly, float>);
static_assert(!optim::Optimizer<FloatOnly, double>);
static_assert(!optim::Optimizer<optim::Sgd, int>);  // T must be floating point

static_assert(optim::Sgd::kSlots == 0 && optim::Momentum::kSlots == 1 && optim::Adam::kSlots == 2);

TEST_CASE_TEMPLATE("make_state sizes the slots from kSlots and starts at step 0", T, float,
                   double) {
  for (const std::size_t n : {0u, 1u, 7u, 1023u}) {
    const auto sgd = optim::make_state<T>(optim::Sgd{}, n);
    const auto momentum = optim::make_state<T>(optim::Momentum{}, n);
    const auto adam = optim::make_state<T>(optim::Adam{}, n);
    CHECK(sgd.slots.empty());
    CHECK(momentum.slots.size() == n);
    CHECK(adam.slots.size() == 2 * n);
    CHECK(sgd.step == 0);
    CHECK(adam.step == 0);
    for (const T x : adam.slots)
      CHECK(x == T(0));
  }
}

TEST_CASE("make_state refuses a size whose slots overflow std::size_t") {
  const std::size_t n = std::numeric_limits<std::size_t>::max() / 2 + 1;
  CHECK_THROWS_WITH_AS(optim::make_state<float>(optim::Adam{}, n),
                       doctest::Contains("strata: optim::make_state: 2 slots of"),
                       strata::UsageError);
}
