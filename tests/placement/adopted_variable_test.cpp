// Variables over the trainer's own storage (Strategy::adopt_variable): adoption makes every copy
// replica 0's; the trainer's own optimizer, called through apply_gradients(update, list), sees
// the gradients aggregated as the strategy's own variables see them, so that training equals a
// single-replica reference computed here independently (quadratic losses, in double), under
// Mirrored, CentralStorage and OneDevice, with every aggregation and both element types; the
// overlapped form gives the same bits; bad buffers and lists get UsageError.
#include <atomic>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/core/error.hpp>
#include <strata/strategies.hpp>

namespace {

using strata::gradient_for;
using strata::placement::VariableAggregation;

constexpr double kLearningRate = 0.25;
constexpr int kSteps = 6;

// Replica r's loss is ½‖w − t_r‖², so its gradient is w − t_r.
double target(std::size_t i, int replica) {
  return static_cast<double>((static_cast<int>(i) * 7 + replica * 5) % 11) - 5.0;
}

// Plain SGD on the single-replica model, by aggregation: mean takes the average target, sum the
// replicas' summed gradients, only_first_replica replica 0's.
std::vector<double> reference(std::size_t n, int replicas, VariableAggregation aggregation,
                              double initial) {
  std::vector<double> w(n, initial);
  for (int step = 0; step < kSteps; ++step)
    for (std::size_t i = 0; i < n; ++i) {
      double g = 0;
      const int contributors =
          aggregation == VariableAggregation::only_first_replica ? 1 : replicas;
      for (int r = 0; r < contributors; ++r)
        g += w[i] - target(i, r);
      if (aggregation == VariableAggregation::mean) g /= replicas;
      w[i] -= kLearningRate * g;
    }
  return w;
}

template <class T>
void check_near(std::span<const T> got, const std::vector<double>& expected) {
  REQUIRE(got.size() == expected.size());
  const double tolerance = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(static_cast<double>(got[i]) - expected[i]) <=
          tolerance * (1 + std::abs(expected[i])));
  }
}

// Trains the trainer-owned model behind `w` (one buffer per local replica, or one) with the
// trainer's SGD; `overlapped` hands the gradient over with begin_apply_gradients. Returns how
// many times the update ran.
template <class Strategy, class T>
int train(Strategy& strategy, strata::placement::AdoptedVariable<T>& w, bool overlapped) {
  std::atomic<int> updates{0};
  std::vector<std::vector<T>> gradients(static_cast<std::size_t>(strategy.num_local_replicas()),
                                        std::vector<T>(w.size()));
  for (int step = 0; step < kSteps; ++step)
    strategy.run([&](auto& ctx) {
      const int replica = ctx.replica_id_in_sync_group();
      std::vector<T>& g = gradients[static_cast<std::size_t>(ctx.local_replica_id())];
      const std::span<const T> params = ctx.read(w);
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<T>(static_cast<double>(params[i]) - target(i, replica));
      // The trainer's own optimizer: it writes the buffer it owns, from the gradient it owns.
      auto sgd = [&, local = ctx.local_replica_id()] {
        ++updates;
        const std::span<T> mine = w.copy_of_replica(local);
        for (std::size_t i = 0; i < mine.size(); ++i)
          mine[i] -= static_cast<T>(kLearningRate) * g[i];
      };
      if (overlapped) {
        auto pending = ctx.begin_apply_gradients(sgd, std::vector{gradient_for(w, g)});
        pending.ready(0);
        pending.apply();
      } else {
        ctx.apply_gradients(sgd, {gradient_for(w, g)});
      }
    });
  return updates.load();
}

template <class T>
void mirrored_case(int replicas, std::size_t n, VariableAggregation aggregation, bool overlapped) {
  CAPTURE(replicas);
  CAPTURE(n);
  CAPTURE(static_cast<int>(aggregation));
  CAPTURE(overlapped);
  strata::MirroredStrategy strategy({.num_replicas = replicas});
  // Each replica's model starts elsewhere: adoption must make them replica 0's.
  std::vector<std::vector<T>> models;
  for (int r = 0; r < replicas; ++r)
    models.emplace_back(n, static_cast<T>(1.5 + r));
  std::vector<std::span<T>> buffers;
  for (auto& model : models)
    buffers.emplace_back(model);
  auto w = strategy.adopt_variable(buffers, aggregation);
  CHECK(w.num_copies() == static_cast<std::size_t>(replicas));
  for (const auto& model : models)
    CHECK(model == models[0]);
  CHECK(models[0] == std::vector<T>(n, static_cast<T>(1.5)));

  CHECK(train(strategy, w, overlapped) == replicas * kSteps);
  const auto expected = reference(n, replicas, aggregation, 1.5);
  check_near<T>(models[0], expected);
  for (const auto& model : models)
    CHECK(model == models[0]);  // the copies agree to the bit
}

TEST_CASE(
    "Mirrored: adopted buffers start as replica 0's and train as one replica on the "
    "global batch") {
  for (const auto aggregation : {VariableAggregation::mean, VariableAggregation::sum,
                                 VariableAggregation::only_first_replica})
    for (const int replicas : {1, 2, 3})
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1031}}) {
        mirrored_case<float>(replicas, n, aggregation, false);
        mirrored_case<double>(replicas, n, aggregation, true);
      }
}

TEST_CASE("the overlapped form gives the list form's bits") {
  for (const auto aggregation : {VariableAggregation::mean, VariableAggregation::sum}) {
    std::vector<std::vector<float>> results;
    for (const bool overlapped : {false, true}) {
      strata::MirroredStrategy strategy({.num_replicas = 3});
      std::vector<std::vector<float>> models(3, std::vector<float>(300, 0.75f));
      std::vector<std::span<float>> buffers(models.begin(), models.end());
      auto w = strategy.adopt_variable(buffers, aggregation);
      train(strategy, w, overlapped);
      results.push_back(models[2]);
    }
    CHECK(results[0] == results[1]);
  }
}

TEST_CASE("CentralStorage: one buffer every replica reads, updated once per step by replica 0") {
  for (const auto aggregation : {VariableAggregation::mean, VariableAggregation::sum,
                                 VariableAggregation::only_first_replica}) {
    CAPTURE(static_cast<int>(aggregation));
    strata::CentralStorageStrategy strategy({.num_replicas = 3});
    std::vector<double> model(257, -2.0);
    auto w = strategy.adopt_variable(std::span(model), aggregation);
    CHECK(train(strategy, w, false) == kSteps);
    check_near<double>(model, reference(model.size(), 3, aggregation, -2.0));
  }
}

TEST_CASE("OneDevice: the update runs every step on the replica's own gradient") {
  strata::OneDeviceStrategy strategy;
  std::vector<float> model(64, 3.0f);
  auto w = strategy.adopt_variable(std::span(model));
  CHECK(train(strategy, w, true) == kSteps);
  check_near<float>(model, reference(model.size(), 1, VariableAggregation::mean, 3.0));
}

TEST_CASE("adopt_variable rejects a wrong number of buffers, unequal sizes and overlaps") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  std::vector<float> a(10), b(10), c(9);
  CHECK_THROWS_AS(strategy.adopt_variable(std::span(a)), strata::UsageError);
  CHECK_THROWS_AS(strategy.adopt_variable(std::vector{std::span(a), std::span(c)}),
                  strata::UsageError);
  const std::span<float> whole(a);
  CHECK_THROWS_AS(strategy.adopt_variable(std::vector{whole.first(6), whole.last(6)}),
                  strata::UsageError);
  // Adjacent halves of one array are two buffers.
  std::vector<float> both(12, 1.0f);
  const std::span<float> halves(both);
  CHECK_NOTHROW(strategy.adopt_variable(std::vector{halves.first(6), halves.last(6)}));
  CHECK_NOTHROW(strategy.adopt_variable(std::vector{std::span(a), std::span(b)}));

  strata::CentralStorageStrategy central({.num_replicas = 2});
  CHECK_THROWS_AS(central.adopt_variable(std::vector{std::span(a), std::span(b)}),
                  strata::UsageError);
}

TEST_CASE("apply_gradients over adopted variables rejects bad lists on every replica") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  std::vector<std::vector<float>> models(2, std::vector<float>(8, 0.0f));
  std::vector<std::span<float>> buffers(models.begin(), models.end());
  auto w = strategy.adopt_variable(buffers);
  bool updated = false;
  CHECK_THROWS_WITH_AS(strategy.run([&](auto& ctx) {
    std::vector<float> g(7);
    ctx.apply_gradients([&] { updated = true; }, {gradient_for(w, g)});
  }),
                       doctest::Contains("7 elements"), strata::UsageError);

  strata::MirroredStrategy fresh({.num_replicas = 2});
  auto unaggregated = fresh.adopt_variable(buffers, VariableAggregation::none);
  CHECK_THROWS_WITH_AS(fresh.run([&](auto& ctx) {
    std::vector<float> g(8);
    ctx.apply_gradients([&] { updated = true; }, {gradient_for(unaggregated, g)});
  }),
                       doctest::Contains("aggregation 'none'"), strata::UsageError);
  CHECK_FALSE(updated);
}

}  // namespace
