// Strategy, ReplicaContext, PerReplica and distributed variables: the tf.distribute API.
#include <atomic>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <strata/strata.hpp>

using namespace strata;
using placement::VariableAggregation;

TEST_CASE("num_replicas_in_sync follows the options and the placement") {
  CHECK(MirroredStrategy({.num_replicas = 3}).num_replicas_in_sync() == 3);
  CHECK(CentralStorageStrategy({.num_replicas = 5}).num_replicas_in_sync() == 5);
  CHECK(OneDeviceStrategy().num_replicas_in_sync() == 1);
  CHECK(DefaultStrategy().num_replicas_in_sync() == 1);
  CHECK(MirroredStrategy().num_replicas_in_sync() >= 1);
  CHECK_THROWS_AS(OneDeviceStrategy({.num_replicas = 2}), UsageError);
  CHECK_THROWS_AS(MirroredStrategy({.num_replicas = -1}), UsageError);
}

TEST_CASE(
    "run executes once per replica, each on its own thread, and returns per-replica results") {
  MirroredStrategy strategy({.num_replicas = 4});
  std::vector<std::thread::id> threads(4);
  auto ids = strategy.run([&](auto& ctx) {
    threads[static_cast<std::size_t>(ctx.replica_id_in_sync_group())] = std::this_thread::get_id();
    CHECK(ctx.num_replicas_in_sync() == 4);
    return ctx.replica_id_in_sync_group() * 10;
  });
  REQUIRE(ids.size() == 4);
  for (int r = 0; r < 4; ++r)
    CHECK(ids[static_cast<std::size_t>(r)] == r * 10);
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = a + 1; b < 4; ++b)
      CHECK(threads[a] != threads[b]);
  CHECK(strategy.experimental_local_results(ids).size() == 4);

  int calls = 0;
  strategy.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) ++calls;  // void result
  });
  CHECK(calls == 1);
}

TEST_CASE("reduce combines per-replica values in replica order") {
  MirroredStrategy strategy({.num_replicas = 4});
  auto values = strategy.run([](auto& ctx) { return float(ctx.replica_id_in_sync_group() + 1); });
  CHECK(strategy.reduce(ReduceOp::sum, values) == 10.0f);
  CHECK(strategy.reduce(ReduceOp::mean, values) == 2.5f);
  CHECK(strategy.reduce(ReduceOp::max, values) == 4.0f);
  CHECK(strategy.reduce(ReduceOp::min, values) == 1.0f);
  CHECK(strategy.reduce(ReduceOp::product, values) == 24.0f);

  auto vectors = strategy.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    return std::vector<std::int64_t>{r, 2 * r};
  });
  CHECK(strategy.reduce(ReduceOp::sum, vectors) == std::vector<std::int64_t>{6, 12});

  auto ragged = strategy.run([](auto& ctx) {
    return std::vector<double>(static_cast<std::size_t>(ctx.replica_id_in_sync_group() + 1));
  });
  CHECK_THROWS_AS(strategy.reduce(ReduceOp::sum, ragged), UsageError);
}

TEST_CASE("the replica context reduces and gathers across replicas") {
  CentralStorageStrategy strategy({.num_replicas = 3});
  auto sums = strategy.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    std::vector<double> local{double(r), 1.0};
    std::vector<double> gathered(6);
    ctx.all_gather(std::span<const double>(local), std::span(gathered));
    CHECK(gathered == std::vector<double>{0, 1, 1, 1, 2, 1});
    std::vector<int> data{r, 1};
    ctx.all_reduce(ReduceOp::max, std::span(data));
    CHECK(data == std::vector<int>{2, 1});
    return ctx.all_reduce(ReduceOp::sum, std::int64_t{r + 1});
  });
  for (auto s : sums)
    CHECK(s == 6);
}

TEST_CASE("the replica context broadcasts, reduces to one, scatters and meets") {
  MirroredStrategy strategy({.num_replicas = 3});
  CHECK(strategy.worker_id() == 0);
  CHECK(strategy.num_workers() == 1);
  strategy.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    CHECK(ctx.worker_id() == 0);
    CHECK(ctx.num_workers() == 1);
    // Replica 1's parameters everywhere, as a trainer that owns its model starts.
    std::vector<float> params(5, float(r));
    ctx.broadcast(std::span(params), 1);
    CHECK(params == std::vector<float>(5, 1.0f));
    std::vector<std::int64_t> counts{r, 10 * r};
    ctx.reduce(ReduceOp::sum, std::span(counts), 2);
    if (r == 2) CHECK(counts == std::vector<std::int64_t>{3, 30});
    // Each replica gets its slice of the sum: replica r's slice is {r, r + 0.5} summed thrice.
    std::vector<double> send{0, 0.5, 1, 1.5, 2, 2.5};
    std::vector<double> slice(2);
    ctx.reduce_scatter(ReduceOp::sum, std::span<const double>(send), std::span(slice));
    CHECK(slice == std::vector<double>{3.0 * r, 3.0 * r + 1.5});
    ctx.barrier();
  });
}

TEST_CASE("a replica that throws releases the others and run rethrows its exception") {
  MirroredStrategy strategy(
      {.num_replicas = 4, .communicator = {.timeout = std::chrono::seconds(20)}});
  const auto start = Clock::now();
  try {
    strategy.run([](auto& ctx) {
      if (ctx.replica_id_in_sync_group() == 2) throw std::runtime_error("replica 2 broke");
      std::vector<float> data(16, 1.0f);
      ctx.all_reduce(ReduceOp::sum, std::span(data));  // would wait for replica 2
    });
    FAIL("run did not throw");
  } catch (const std::runtime_error& error) {
    CHECK(std::string(error.what()) == "replica 2 broke");
  }
  CHECK(Clock::now() - start < std::chrono::seconds(5));  // far below the 20 s deadline
  // The communicators are failed now: later collectives refuse to run.
  CHECK_THROWS_AS(strategy.run([](auto& ctx) { ctx.communicator().barrier(); }), PeerFailureError);
}

TEST_CASE("run cannot be nested") {
  MirroredStrategy strategy({.num_replicas = 2});
  CHECK_THROWS_AS(strategy.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) strategy.run([](auto&) {});
  }),
                  UsageError);
}

TEST_CASE("variable storage follows the placement") {
  const std::vector<float> initial{1, 2, 3};
  MirroredStrategy mirrored({.num_replicas = 4});
  CentralStorageStrategy central({.num_replicas = 4});
  OneDeviceStrategy one;
  auto m = mirrored.create_variable<float>(initial);
  auto c = central.create_variable<float>(initial);
  auto o = one.create_variable<float>(initial);
  CHECK(m.num_copies() == 4);
  CHECK(c.num_copies() == 1);
  CHECK(o.num_copies() == 1);
  CHECK(m.aggregation() == VariableAggregation::mean);

  // Each Mirrored replica reads its own copy; CentralStorage replicas share one.
  auto views = mirrored.run([&](auto& ctx) { return ctx.read(m).data(); });
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = a + 1; b < 4; ++b)
      CHECK(views[a] != views[b]);
  auto shared = central.run([&](auto& ctx) { return ctx.read(c).data(); });
  for (auto* p : shared)
    CHECK(p == shared[0]);

  // Cross-replica assignment sets every copy.
  m.assign(std::vector<float>{7, 8, 9});
  for (std::size_t k = 0; k < 4; ++k)
    CHECK(m.copy(k)[2] == 9.0f);
  CHECK_THROWS_AS(m.assign(std::vector<float>{1}), UsageError);
}

TEST_CASE_TEMPLATE("replica-context assign aggregates by the variable's aggregation", S,
                   MirroredStrategy, CentralStorageStrategy) {
  S strategy({.num_replicas = 4});
  auto assign_all = [&](VariableAggregation aggregation) {
    auto v = strategy.template create_variable<double>(std::vector<double>{0, 0}, aggregation);
    strategy.run([&](auto& ctx) {
      const double r = ctx.replica_id_in_sync_group();
      ctx.assign(v, std::vector<double>{r + 1, 10 * (r + 1)});
    });
    for (std::size_t k = 0; k < v.num_copies(); ++k)
      CHECK(v.copy(k)[0] == v.read()[0]);
    return std::vector<double>(v.read().begin(), v.read().end());
  };
  CHECK(assign_all(VariableAggregation::sum) == std::vector<double>{10, 100});
  CHECK(assign_all(VariableAggregation::mean) == std::vector<double>{2.5, 25});
  CHECK(assign_all(VariableAggregation::only_first_replica) == std::vector<double>{1, 10});
  CHECK_THROWS_AS(assign_all(VariableAggregation::none), UsageError);
}

TEST_CASE_TEMPLATE("apply_gradients aggregates gradients, then updates every copy alike", S,
                   MirroredStrategy, CentralStorageStrategy) {
  const optim::Sgd sgd{0.5};
  auto step = [&](VariableAggregation aggregation) {
    S strategy({.num_replicas = 4});
    auto v = strategy.template create_variable<float>(std::vector<float>{1, 1, 1}, aggregation);
    strategy.run([&](auto& ctx) {
      const float g = float(ctx.replica_id_in_sync_group() + 1);  // 1, 2, 3, 4
      std::vector<float> gradient{g, 2 * g, 0};
      ctx.apply_gradients(sgd, std::span(gradient), v);
    });
    for (std::size_t k = 1; k < v.num_copies(); ++k)
      for (std::size_t i = 0; i < 3; ++i)
        CHECK(v.copy(k)[i] == v.copy(0)[i]);
    return std::vector<float>(v.read().begin(), v.read().end());
  };
  CHECK(step(VariableAggregation::mean) == std::vector<float>{1 - 0.5f * 2.5f, 1 - 0.5f * 5, 1});
  CHECK(step(VariableAggregation::sum) == std::vector<float>{1 - 0.5f * 10, 1 - 0.5f * 20, 1});
  CHECK(step(VariableAggregation::only_first_replica) == std::vector<float>{0.5f, 0, 1});
  CHECK_THROWS_AS(step(VariableAggregation::none), UsageError);
}

TEST_CASE("optimizer state lives with each copy and sticks to one optimizer") {
  MirroredStrategy strategy({.num_replicas = 2});
  auto v = strategy.create_variable<double>(std::vector<double>{1.0});
  const optim::Momentum momentum{.learning_rate = 0.1, .momentum = 0.9};
  for (int s = 0; s < 2; ++s)
    strategy.run([&](auto& ctx) {
      std::vector<double> g{1.0};
      ctx.apply_gradients(momentum, std::span(g), v);
    });
  // v1 = -0.1, p = 0.9; v2 = 0.9 * -0.1 - 0.1 = -0.19, p = 0.71 — on both copies.
  CHECK(v.copy(0)[0] == doctest::Approx(0.71).epsilon(1e-12));
  CHECK(v.copy(1)[0] == v.copy(0)[0]);
  CHECK_THROWS_AS(strategy.run([&](auto& ctx) {
    std::vector<double> g{1.0};
    ctx.apply_gradients(optim::Adam{}, std::span(g), v);  // 2 slots, not momentum's 1
  }),
                  UsageError);
}

TEST_CASE("a gradient of the wrong size is a usage error on every strategy, never a hang") {
  MirroredStrategy strategy(
      {.num_replicas = 3, .communicator = {.timeout = std::chrono::seconds(20)}});
  auto v = strategy.create_variable<float>(std::vector<float>(4, 0.0f));
  const auto start = Clock::now();
  CHECK_THROWS_AS(strategy.run([&](auto& ctx) {
    std::vector<float> g(ctx.replica_id_in_sync_group() == 1 ? 3 : 4, 1.0f);
    ctx.apply_gradients(optim::Sgd{}, std::span(g), v);
  }),
                  UsageError);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}
