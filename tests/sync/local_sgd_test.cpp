// Tests of strata/sync/local_sgd.hpp: replicas step on their own gradients and average their
// copies every period, checked against a replica-by-replica simulation in double precision.
#include <cstddef>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <strata/strata.hpp>

namespace {

using strata::UsageError;
using strata::placement::VariableAggregation;

template <int kPeriod>
using LocalSgdStrategy =
    strata::Strategy<strata::placement::Mirrored, strata::communicator::LocalCommunicator<>,
                     strata::sync::LocalSgd<kPeriod>>;

constexpr float kLearningRate = 0.25f;

// Replica r's gradient of element i at step s: different on every replica and step.
float gradient_of(int replica, std::size_t i, int step) {
  return 0.01f * float((replica + 1) * (static_cast<int>(i) + 2)) + 0.003f * float(step % 5) -
         0.02f * float(replica == 2);
}

// What every replica's copy holds after `steps` steps of plain SGD under LocalSgd<period>:
// each replica steps alone (on its gradient times `scale`: the replicas for a summed
// variable), and every period the copies are replaced by their mean.
std::vector<std::vector<double>> simulate(int replicas, int period, int steps,
                                          const std::vector<float>& initial, double scale = 1) {
  std::vector<std::vector<double>> copies(static_cast<std::size_t>(replicas),
                                          std::vector<double>(initial.begin(), initial.end()));
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < replicas; ++r)
      for (std::size_t i = 0; i < initial.size(); ++i)
        copies[static_cast<std::size_t>(r)][i] -= kLearningRate * scale * gradient_of(r, i, s);
    if ((s + 1) % period != 0) continue;
    for (std::size_t i = 0; i < initial.size(); ++i) {
      double sum = 0;
      for (const auto& copy : copies)
        sum += copy[i];
      for (auto& copy : copies)
        copy[i] = sum / replicas;
    }
  }
  return copies;
}

template <class Variable>
void check_against(const Variable& variable, const std::vector<std::vector<double>>& expected) {
  for (std::size_t r = 0; r < expected.size(); ++r) {
    CAPTURE(r);
    for (std::size_t i = 0; i < expected[r].size(); ++i) {
      CAPTURE(i);
      CHECK(variable.copy(r)[i] == doctest::Approx(expected[r][i]).epsilon(1e-5));
    }
  }
}

template <class Variable>
bool copies_equal(const Variable& variable) {
  for (std::size_t r = 1; r < variable.num_copies(); ++r)
    for (std::size_t i = 0; i < variable.size(); ++i)
      if (variable.copy(r)[i] != variable.copy(0)[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("LocalSgd steps each replica alone and averages the copies every period") {
  constexpr int kReplicas = 3;
  constexpr int kPeriod = 3;
  const std::vector<float> initial{1.0f, -2.0f, 0.5f, 3.0f, 0.0f, 7.0f, -1.5f};  // 7: a prime
  LocalSgdStrategy<kPeriod> strategy({.num_replicas = kReplicas});
  auto w = strategy.create_variable<float>(initial);
  const strata::optim::Sgd sgd{kLearningRate};
  for (int s = 0; s < 8; ++s) {
    CAPTURE(s);
    strategy.run([&](auto& ctx) {
      std::vector<float> g(initial.size());
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = gradient_of(ctx.replica_id_in_sync_group(), i, s);
      ctx.apply_gradients(sgd, std::span(g), w);
    });
    check_against(w, simulate(kReplicas, kPeriod, s + 1, initial));
    // The copies are bit-identical right after an averaging step, and apart between them.
    CHECK(copies_equal(w) == ((s + 1) % kPeriod == 0));
  }
}

TEST_CASE("LocalSgd's list form averages every variable of the list together") {
  constexpr int kReplicas = 4;
  constexpr int kPeriod = 2;
  const std::vector<float> initial_w{0.5f, 1.5f, -0.5f, 2.0f, 4.0f};
  const std::vector<float> initial_b{0.25f};
  LocalSgdStrategy<kPeriod> strategy({.num_replicas = kReplicas});
  auto w = strategy.create_variable<float>(initial_w);
  auto b = strategy.create_variable<float>(initial_b, VariableAggregation::sum);
  const strata::optim::Sgd sgd{kLearningRate};
  for (int s = 0; s < 5; ++s) {
    CAPTURE(s);
    strategy.run([&](auto& ctx) {
      const int r = ctx.replica_id_in_sync_group();
      std::vector<float> gw(initial_w.size());
      for (std::size_t i = 0; i < gw.size(); ++i)
        gw[i] = gradient_of(r, i, s);
      std::vector<float> gb{gradient_of(r, 0, s)};
      ctx.apply_gradients(sgd, {strata::gradient_for(w, gw), strata::gradient_for(b, gb)});
    });
    check_against(w, simulate(kReplicas, kPeriod, s + 1, initial_w));
    check_against(b, simulate(kReplicas, kPeriod, s + 1, initial_b, kReplicas));
    CHECK(copies_equal(w) == ((s + 1) % kPeriod == 0));
    CHECK(copies_equal(b) == ((s + 1) % kPeriod == 0));
  }
}

TEST_CASE("LocalSgd<1> with SGD or momentum is synchronous training, averaged or summed") {
  const std::vector<double> initial{1.0, 2.0, -3.0};
  auto compare = [&](const auto& optimizer, VariableAggregation aggregation) {
    auto step = [&](auto& strategy, auto& variable, int s) {
      strategy.run([&](auto& ctx) {
        std::vector<double> g(initial.size());
        for (std::size_t i = 0; i < g.size(); ++i)
          g[i] = gradient_of(ctx.replica_id_in_sync_group(), i, s);
        ctx.apply_gradients(optimizer, std::span(g), variable);
      });
    };
    LocalSgdStrategy<1> local({.num_replicas = 3});
    strata::MirroredStrategy synchronous({.num_replicas = 3});
    auto a = local.create_variable<double>(initial, aggregation);
    auto b = synchronous.create_variable<double>(initial, aggregation);
    for (int s = 0; s < 4; ++s) {
      step(local, a, s);
      step(synchronous, b, s);
      CHECK(copies_equal(a));
      for (std::size_t i = 0; i < initial.size(); ++i)
        CHECK(a.read()[i] == doctest::Approx(b.read()[i]).epsilon(1e-12));
    }
  };
  for (const auto aggregation : {VariableAggregation::mean, VariableAggregation::sum}) {
    CAPTURE(static_cast<int>(aggregation));
    compare(strata::optim::Sgd{0.5}, aggregation);
    compare(strata::optim::Momentum{.learning_rate = 0.5, .momentum = 0.9}, aggregation);
  }
}

TEST_CASE("LocalSgd by aggregation: only the first replica's copy, and 'none' refused") {
  LocalSgdStrategy<2> strategy({.num_replicas = 3});
  auto first = strategy.create_variable<float>(std::vector<float>{1, 1},
                                               VariableAggregation::only_first_replica);
  const strata::optim::Sgd sgd{1.0f};
  for (int s = 0; s < 2; ++s)
    strategy.run([&](auto& ctx) {
      std::vector<float> g(2, float(ctx.replica_id_in_sync_group() + 1));
      ctx.apply_gradients(sgd, std::span(g), first);
    });
  // Replica 0 stepped by 1 twice; its copy is everyone's after the second step.
  CHECK(copies_equal(first));
  CHECK(first.read()[0] == -1.0f);

  auto none = strategy.create_variable<float>(std::vector<float>{1}, VariableAggregation::none);
  CHECK_THROWS_AS(strategy.run([&](auto& ctx) {
    std::vector<float> g{1.0f};
    ctx.apply_gradients(sgd, std::span(g), none);
  }),
                  UsageError);
  // A list that names it is refused before any of its variables changes.
  LocalSgdStrategy<2> fresh({.num_replicas = 3});
  auto w = fresh.create_variable<float>(std::vector<float>{5, 5});
  auto refused = fresh.create_variable<float>(std::vector<float>{1}, VariableAggregation::none);
  CHECK_THROWS_AS(fresh.run([&](auto& ctx) {
    std::vector<float> gw(2, 1.0f);
    std::vector<float> g{1.0f};
    ctx.apply_gradients(sgd, {strata::gradient_for(w, gw), strata::gradient_for(refused, g)});
  }),
                  UsageError);
  for (std::size_t r = 0; r < w.num_copies(); ++r)
    CHECK(w.copy(r)[0] == 5.0f);
}

TEST_CASE("LocalSgd: average_now mid-period, one replica, and assign") {
  using Sync = strata::sync::LocalSgd<4>;
  const strata::optim::Sgd sgd{1.0f};
  {
    LocalSgdStrategy<4> strategy({.num_replicas = 2});
    auto w = strategy.create_variable<float>(std::vector<float>{0, 0, 0});
    strategy.run([&](auto& ctx) {
      std::vector<float> g(3, float(ctx.replica_id_in_sync_group()));  // 0 and 1
      ctx.apply_gradients(sgd, std::span(g), w);
    });
    CHECK_FALSE(copies_equal(w));
    strategy.run([&](auto& ctx) { Sync::average_now(ctx, w); });
    CHECK(copies_equal(w));
    CHECK(w.read()[0] == -0.5f);
    // assign aggregates the replicas' values (mean) into every copy.
    strategy.run([&](auto& ctx) {
      std::vector<float> value(3, float(2 * ctx.replica_id_in_sync_group()));  // 0 and 2
      ctx.assign(w, std::span<const float>(value));
    });
    CHECK(copies_equal(w));
    CHECK(w.read()[2] == 1.0f);
  }
  {
    // One replica: no collective, the updates are plain SGD.
    LocalSgdStrategy<4> strategy({.num_replicas = 1});
    auto w = strategy.create_variable<float>(std::vector<float>{1});
    for (int s = 0; s < 5; ++s)
      strategy.run([&](auto& ctx) {
        std::vector<float> g{1.0f};
        ctx.apply_gradients(sgd, std::span(g), w);
      });
    CHECK(w.read()[0] == -4.0f);
  }
}

TEST_CASE("LocalSgd: a replica that passes a gradient of the wrong size fails every replica") {
  LocalSgdStrategy<1> strategy({.num_replicas = 3});
  auto w = strategy.create_variable<float>(std::vector<float>(4, 0.0f));
  CHECK_THROWS_AS(strategy.run([&](auto& ctx) {
    std::vector<float> g(ctx.replica_id_in_sync_group() == 1 ? 3 : 4, 1.0f);
    ctx.apply_gradients(strata::optim::Sgd{}, std::span(g), w);
  }),
                  UsageError);
}
