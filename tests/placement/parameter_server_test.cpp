// The ParameterServer placement against in-process parameter servers on loopback: each variable's
// update rule (the servers' optimizer, or the workers' with the servers summing), sharded or
// not, against the optimizer applied locally. The multi-process strategy tests are in
// tests/strategy/parameter_server_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/core/error.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/placement/parameter_server.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/server.hpp>

#include "worker_cluster.hpp"

namespace {

using strata::placement::VariableAggregation;
using strata::ps::UpdateRule;

// An optimizer the servers do not have: params -= rate * sign(grad).
struct SignStep {
  static constexpr std::size_t kSlots = 0;
  float rate = 0.25f;
  void apply(std::span<float> params, std::span<const float> grads,
             strata::optim::OptimizerState<float>& state) const {
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] -= grads[i] > 0 ? rate : grads[i] < 0 ? -rate : 0.0f;
    ++state.step;
  }
};

// `count` in-process parameter servers of a cluster of `workers` workers (one by default).
struct Servers {
  explicit Servers(int count, int workers = 1)
      : spec(strata::testing::loopback_ps_cluster(workers, count)),
        reports(static_cast<std::size_t>(count)) {
    for (int s = 0; s < count; ++s)
      running.push_back(std::make_unique<strata::ps::Server>(spec, s));
    for (std::size_t s = 0; s < running.size(); ++s)
      threads.emplace_back([this, s] { reports[s] = running[s]->serve(); });
  }
  ~Servers() { stop(); }
  // Waits for the servers to return (once every worker is done) and returns their reports.
  const std::vector<strata::ps::ServerReport>& join() {
    for (auto& thread : threads)
      thread.join();
    threads.clear();
    return reports;
  }
  void stop() {
    for (auto& server : running)
      server->stop();
    join();
  }
  strata::cluster::ClusterSpec spec;
  std::vector<strata::ps::ServerReport> reports;
  std::vector<std::unique_ptr<strata::ps::Server>> running;
  std::vector<std::thread> threads;
};

std::vector<float> gradient_of(std::size_t n, int step) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] = static_cast<float>((static_cast<int>(i) * 7 + step * 3) % 11) - 5.0f;
  return g;
}

}  // namespace

TEST_CASE("each variable keeps its own update rule, sharded or not") {
  using Placement = strata::placement::ParameterServer<strata::ps::FixedShardsPartitioner>;
  Servers servers(2);
  Placement::session_type session(servers.spec, 0, 1, {}, strata::ps::FixedShardsPartitioner{3});
  constexpr std::size_t kSize = 101;
  std::vector<float> initial(kSize);
  for (std::size_t i = 0; i < kSize; ++i)
    initial[i] = 0.01f * static_cast<float>(i);
  auto on_servers = Placement::create<float>(session, initial, VariableAggregation::sum);
  auto summed =
      Placement::create<float>(session, initial, VariableAggregation::sum, UpdateRule::sum);
  CHECK(on_servers.update_rule() == UpdateRule::optimizer);
  CHECK(summed.update_rule() == UpdateRule::sum);
  CHECK(summed.shards().size() == 3);

  const strata::optim::Momentum momentum{0.05f, 0.9f};
  std::vector<float> reference = initial;
  auto state = strata::optim::make_state<float>(momentum, kSize);
  for (int step = 0; step < 12; ++step) {
    const auto gradient = gradient_of(kSize, step);
    momentum.apply(std::span(reference), std::span<const float>(gradient), state);
    Placement::apply(on_servers, 0, momentum, std::span<const float>(gradient));
    Placement::apply(summed, 0, momentum, std::span<const float>(gradient));
  }
  // Both rules run the same element-wise arithmetic on the same values; the sum rule adds the
  // worker's change back onto the server's copy, which may round differently in the last bit.
  const auto a = on_servers.read();
  const auto b = summed.read();
  for (std::size_t i = 0; i < kSize; ++i) {
    CAPTURE(i);
    CHECK(a[i] == reference[i]);
    CHECK(b[i] == doctest::Approx(reference[i]).epsilon(1e-5));
  }
}

TEST_CASE("an optimizer the servers lack needs UpdateRule::sum, per variable") {
  using Placement = strata::placement::ParameterServer<>;
  Servers servers(1);
  Placement::session_type session(servers.spec, 0, 1, {});
  const std::vector<float> initial{1.0f, 2.0f, 3.0f};
  auto on_servers = Placement::create<float>(session, initial, VariableAggregation::mean);
  auto summed =
      Placement::create<float>(session, initial, VariableAggregation::mean, UpdateRule::sum);
  const std::vector<float> gradient{1.0f, -2.0f, 0.0f};
  Placement::apply(summed, 0, SignStep{}, std::span<const float>(gradient));
  const auto values = summed.read();
  CHECK(values[0] == 0.75f);
  CHECK(values[1] == 2.25f);
  CHECK(values[2] == 3.0f);
  try {
    Placement::apply(on_servers, 0, SignStep{}, std::span<const float>(gradient));
    FAIL("a server-side variable took an optimizer the servers lack");
  } catch (const strata::UsageError& e) {
    CHECK(std::string(e.what()).find("UpdateRule::sum") != std::string::npos);
  }
  const auto untouched = on_servers.read();
  CHECK(untouched[0] == 1.0f);
}

namespace {

std::filesystem::path checkpoint_path(const char* what) {
  return std::filesystem::temp_directory_path() /
         fmt::format("strata_ps_state_{}_{}.safetensors", what, ::getpid());
}

}  // namespace

TEST_CASE("the servers' optimizer state goes into a checkpoint and back, under other shards") {
  // Adam, Momentum and SGD on the servers: 6 updates over 2 ps tasks in 3 shards, a checkpoint,
  // then 6 more on fresh servers in 2 shards (or one), or in a Mirrored-style variable on the host,
  // restored from it. Each must end where 12 updates on the host end, bit for bit, slots and step
  // included.
  using Partitioner = strata::ps::FixedShardsPartitioner;
  using Placement = strata::placement::ParameterServer<Partitioner>;
  constexpr std::size_t kSize = 101;
  std::vector<float> initial(kSize);
  for (std::size_t i = 0; i < kSize; ++i)
    initial[i] = 0.01f * static_cast<float>(i) - 0.3f;
  const auto run = [&](const auto& optimizer) {
    constexpr std::uint64_t kSlots = std::remove_cvref_t<decltype(optimizer)>::kSlots;
    CAPTURE(kSlots);
    std::vector<float> reference = initial;
    auto state = strata::optim::make_state<float>(optimizer, kSize);
    for (int step = 0; step < 12; ++step)
      optimizer.apply(std::span(reference), std::span<const float>(gradient_of(kSize, step)),
                      state);

    const auto file = checkpoint_path("servers");
    {
      Servers servers(2);
      Placement::session_type session(servers.spec, 0, 1, {}, Partitioner{3});
      auto w = Placement::create<float>(session, initial, VariableAggregation::sum);
      strata::checkpoint::Checkpoint checkpoint;
      checkpoint.track("w", w);
      checkpoint.save(file);  // before any update: no state
      CHECK(strata::checkpoint::Checkpoint::read_header(file).find("w/.optimizer/slots") ==
            nullptr);
      for (int step = 0; step < 6; ++step)
        Placement::apply(w, 0, optimizer, std::span<const float>(gradient_of(kSize, step)));
      checkpoint.save(file);
    }
    const auto header = strata::checkpoint::Checkpoint::read_header(file);
    REQUIRE(header.find("w/.optimizer/slots") != nullptr);
    CHECK(header.find("w/.optimizer/slots")->shape == std::vector<std::uint64_t>{kSlots, kSize});

    for (const int shards : {1, 2}) {
      CAPTURE(shards);
      Servers servers(1);
      Placement::session_type session(servers.spec, 0, 1, {}, Partitioner{shards});
      auto w = Placement::create<float>(session, std::vector<float>(kSize, 9.0f),
                                        VariableAggregation::sum);
      // A state to be replaced: the restore must not merge with it.
      Placement::apply(w, 0, optimizer, std::span<const float>(gradient_of(kSize, 99)));
      strata::checkpoint::Checkpoint checkpoint;
      checkpoint.track("w", w);
      checkpoint.restore(file);
      for (int step = 6; step < 12; ++step)
        Placement::apply(w, 0, optimizer, std::span<const float>(gradient_of(kSize, step)));
      const auto values = w.read();
      CHECK(std::equal(values.begin(), values.end(), reference.begin(), reference.end()));
      strata::optim::OptimizerState<float> gathered;
      CHECK(w.read_optimizer_state(gathered) == kSlots);
      CHECK(gathered.step == 12);
      CHECK(gathered.slots == state.slots);
    }
    {
      strata::placement::Variable<float> host(2, std::vector<float>(kSize, 0.0f),
                                              VariableAggregation::sum);
      strata::checkpoint::Checkpoint checkpoint;
      checkpoint.track("w", host);
      checkpoint.restore(file);
      for (int step = 6; step < 12; ++step)
        optimizer.apply(host.copy(0), std::span<const float>(gradient_of(kSize, step)),
                        host.optimizer_state(0, optimizer));
      CHECK(
          std::equal(host.copy(0).begin(), host.copy(0).end(), reference.begin(), reference.end()));
    }
    std::filesystem::remove(file);
  };
  run(strata::optim::Adam{.learning_rate = 0.01});
  run(strata::optim::Momentum{0.05f, 0.9f});
  run(strata::optim::Sgd{0.1f});  // no slots, a step
}

TEST_CASE("a Mirrored checkpoint's optimizer state restores onto the servers") {
  // Mirrored's variable with Momentum state, saved; restored into a server-side variable, which
  // continues with the servers' Momentum exactly as the host would.
  using Placement = strata::placement::ParameterServer<strata::ps::FixedShardsPartitioner>;
  constexpr std::size_t kSize = 37;
  const strata::optim::Momentum momentum{0.05f, 0.9f, true};
  strata::placement::Variable<float> host(1, std::vector<float>(kSize, 1.0f),
                                          VariableAggregation::sum);
  for (int step = 0; step < 4; ++step)
    momentum.apply(host.copy(0), std::span<const float>(gradient_of(kSize, step)),
                   host.optimizer_state(0, momentum));
  const auto file = checkpoint_path("mirrored");
  strata::checkpoint::Checkpoint saved;
  saved.track("w", host);
  saved.save(file);
  for (int step = 4; step < 8; ++step)
    momentum.apply(host.copy(0), std::span<const float>(gradient_of(kSize, step)),
                   host.optimizer_state(0, momentum));

  Servers servers(2);
  Placement::session_type session(servers.spec, 0, 1, {}, strata::ps::FixedShardsPartitioner{2});
  auto w =
      Placement::create<float>(session, std::vector<float>(kSize, 0.0f), VariableAggregation::sum);
  strata::checkpoint::Checkpoint restored;
  restored.track("w", w);
  restored.restore(file);
  for (int step = 4; step < 8; ++step)
    Placement::apply(w, 0, momentum, std::span<const float>(gradient_of(kSize, step)));
  const auto values = w.read();
  CHECK(std::equal(values.begin(), values.end(), host.copy(0).begin(), host.copy(0).end()));

  SUBCASE("a state the servers cannot keep is refused before anything changes") {
    // Three slots per element: no optimizer of the servers'.
    strata::placement::Variable<float> odd(1, std::vector<float>(kSize, 2.0f),
                                           VariableAggregation::sum);
    strata::optim::OptimizerState<float> three{std::vector<float>(3 * kSize, 0.5f), 2};
    odd.restore_optimizer_state(&three, 3);
    strata::checkpoint::Checkpoint with_odd;
    with_odd.track("w", odd);
    with_odd.save(file);
    CHECK_THROWS_WITH_AS(restored.restore(file), doctest::Contains("3 slots per element"),
                         strata::CheckpointError);
    const auto after = w.read();
    CHECK(std::equal(after.begin(), after.end(), values.begin(), values.end()));
  }
  std::filesystem::remove(file);
}

TEST_CASE("under UpdateRule::sum only a slotless optimizer's state is checkpointed") {
  using Placement = strata::placement::ParameterServer<>;
  Servers servers(1);
  Placement::session_type session(servers.spec, 0, 2, {});
  const std::vector<float> initial(5, 1.0f);
  auto with_sgd =
      Placement::create<float>(session, initial, VariableAggregation::sum, UpdateRule::sum);
  auto with_momentum =
      Placement::create<float>(session, initial, VariableAggregation::sum, UpdateRule::sum);
  for (int lane = 0; lane < 2; ++lane) {
    Placement::apply(with_sgd, lane, strata::optim::Sgd{0.1f},
                     std::span<const float>(gradient_of(5, lane)));
    Placement::apply(with_momentum, lane, strata::optim::Momentum{0.1f, 0.9f},
                     std::span<const float>(gradient_of(5, lane)));
  }
  const auto file = checkpoint_path("sum");
  strata::checkpoint::Checkpoint sgd_only;
  sgd_only.track("w", with_sgd);
  sgd_only.save(file);
  const auto header = strata::checkpoint::Checkpoint::read_header(file);
  REQUIRE(header.find("w/.optimizer/slots") != nullptr);
  CHECK(header.find("w/.optimizer/slots")->shape == std::vector<std::uint64_t>{0, 5});
  sgd_only.restore(file);

  strata::checkpoint::Checkpoint momentum_too;
  momentum_too.track("w", with_momentum);
  CHECK_THROWS_WITH_AS(momentum_too.save(file), doctest::Contains("UpdateRule::optimizer"),
                       strata::UsageError);
  std::filesystem::remove(file);
}

TEST_CASE("a batch of updates equals the updates one by one") {
  // Three variables over 2 servers, one sharded and one summed by the servers, updated 5 times
  // in one batch per step on one session and one by one on another: the same values.
  using Placement = strata::placement::ParameterServer<strata::ps::FixedShardsPartitioner>;
  const strata::optim::Momentum momentum{0.05f, 0.9f};
  const auto run = [&](bool batched) {
    Servers servers(2);
    Placement::session_type session(servers.spec, 0, 1, {}, strata::ps::FixedShardsPartitioner{3});
    auto w =
        Placement::create<float>(session, std::vector<float>(50, 1.0f), VariableAggregation::sum);
    auto b = Placement::create<float>(session, std::vector<float>(1, 0.5f),
                                      VariableAggregation::sum, UpdateRule::sum);
    auto c =
        Placement::create<float>(session, std::vector<float>(7, -1.0f), VariableAggregation::sum);
    std::vector<strata::placement::ShardedVariable<float>*> variables{&w, &b, &c};
    for (int step = 0; step < 5; ++step) {
      std::vector<std::vector<float>> gradients;
      for (auto* variable : variables)
        gradients.push_back(gradient_of(variable->size(), step));
      std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
      const std::vector<strata::ps::SyncSpec> syncs(3);
      if (batched) {
        Placement::apply_all(0, momentum,
                             std::span<strata::placement::ShardedVariable<float>* const>(variables),
                             std::span<const std::span<const float>>(spans),
                             std::span<const strata::ps::SyncSpec>(syncs));
      } else {
        for (std::size_t i = 0; i < variables.size(); ++i)
          Placement::apply(*variables[i], 0, momentum, spans[i]);
      }
    }
    std::vector<float> out;
    for (auto* variable : variables) {
      const auto values = variable->read();
      out.insert(out.end(), values.begin(), values.end());
    }
    return out;
  };
  CHECK(run(true) == run(false));
}

namespace {

using BackupPlacement = strata::placement::ParameterServer<strata::ps::FixedShardsPartitioner>;
using Variables = std::vector<strata::placement::ShardedVariable<float>*>;

// Synchronous with one backup among 3 replicas: a step aggregates the first 2 gradients.
strata::ps::SyncSpec with_one_backup(int replica, strata::ps::SyncSpec::Aggregation aggregation) {
  strata::ps::SyncSpec sync;
  sync.mode = strata::ps::SyncSpec::Mode::synchronous;
  sync.aggregation = aggregation;
  sync.replica = static_cast<std::uint32_t>(replica);
  sync.replicas = 3;
  sync.bound = 2;
  return sync;
}

// One step of `variables` in one batch, every element of every gradient `value`.
void step_all(const Variables& variables, float value, const strata::ps::SyncSpec& sync,
              const strata::optim::Sgd& sgd) {
  std::vector<std::vector<float>> gradients;
  for (auto* variable : variables)
    gradients.emplace_back(variable->size(), value);
  const std::vector<std::span<const float>> spans(gradients.begin(), gradients.end());
  const std::vector<strata::ps::SyncSpec> syncs(variables.size(), sync);
  BackupPlacement::apply_all(0, sgd,
                             std::span<strata::placement::ShardedVariable<float>* const>(
                                 variables.data(), variables.size()),
                             std::span<const std::span<const float>>(spans),
                             std::span<const strata::ps::SyncSpec>(syncs));
}

// What `body` raised ("" when nothing): a worker thread's error, for the test thread to check.
template <class Body>
std::string error_of(Body&& body) {
  try {
    body();
    return {};
  } catch (const std::exception& error) {
    return error.what();
  }
}

// A worker of the backup tests: its session and the same two variables as every other's.
struct BackupWorker {
  BackupWorker(const strata::cluster::ClusterSpec& spec, int rank)
      : session(std::make_unique<BackupPlacement::session_type>(
            spec, rank, 1, strata::ps::ClientOptions{}, strata::ps::FixedShardsPartitioner{3})),
        w(BackupPlacement::create<float>(*session, std::vector<float>(10, 100.0f),
                                         VariableAggregation::mean)),
        b(BackupPlacement::create<float>(*session, std::vector<float>(1, 100.0f),
                                         VariableAggregation::mean)) {}
  Variables variables() { return {&w, &b}; }
  std::unique_ptr<BackupPlacement::session_type> session;
  strata::placement::ShardedVariable<float> w, b;
};

}  // namespace

TEST_CASE("with a backup replica a step applies the first gradients, and a late one is dropped") {
  // 3 workers, one a backup: workers 0 and 1 run 4 steps without worker 2, whose gradient of
  // step 0 then comes late and is dropped; once 0 and 1 are done, worker 2's steps apply alone.
  Servers servers(2, 3);
  using Aggregation = strata::ps::SyncSpec::Aggregation;
  const strata::optim::Sgd sgd{0.5f};
  std::vector<std::unique_ptr<BackupWorker>> workers;
  for (int rank = 0; rank < 3; ++rank)
    workers.push_back(std::make_unique<BackupWorker>(servers.spec, rank));
  CHECK(workers[0]->w.shards().size() == 3);
  workers[2]->w.pull(0);  // worker 2 computes its first step on the initial values
  workers[2]->b.pull(0);

  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank)
    threads.emplace_back([&, rank] {
      errors[static_cast<std::size_t>(rank)] = error_of([&] {
        for (int step = 0; step < 4; ++step)
          step_all(workers[static_cast<std::size_t>(rank)]->variables(),
                   static_cast<float>(rank + 1), with_one_backup(rank, Aggregation::mean), sgd);
      });
    });
  for (auto& thread : threads)
    thread.join();
  for (const auto& error : errors)
    REQUIRE_MESSAGE(error.empty(), error);
  // Each step averaged gradients 1 and 2 and applied SGD once: 100 - 4 * 0.5 * 1.5.
  const auto all_equal = [](std::span<const float> values, float expected) {
    return std::all_of(values.begin(), values.end(), [&](float v) { return v == expected; });
  };
  CHECK(all_equal(workers[0]->w.copy(0), 97.0f));
  CHECK(all_equal(workers[1]->b.copy(0), 97.0f));

  // Worker 2's gradient of step 0 is dropped on every shard; it gets the current values.
  step_all(workers[2]->variables(), 3.0f, with_one_backup(2, Aggregation::mean), sgd);
  CHECK(all_equal(workers[2]->w.copy(0), 97.0f));
  CHECK(all_equal(workers[2]->b.copy(0), 97.0f));
  CHECK(all_equal(workers[0]->w.read(), 97.0f));

  // Workers 0 and 1 are done: worker 2's next step is applied on its own gradient.
  workers[0].reset();
  workers[1].reset();
  step_all(workers[2]->variables(), 3.0f, with_one_backup(2, Aggregation::mean), sgd);
  CHECK(all_equal(workers[2]->w.copy(0), 95.5f));
  CHECK(all_equal(workers[2]->b.read(), 95.5f));
  workers[2].reset();
  std::uint64_t stale = 0;
  for (const auto& report : servers.join())
    stale += report.stale_gradients;
  CHECK(stale == 4);  // worker 2's gradient of step 0, on each of the 4 shards
}

TEST_CASE("with a backup replica, workers in any order never wait on each other for good") {
  // 3 workers, 2 aggregated per step, 3 variables in 7 shards over 2 servers, each worker
  // pausing at random before each step. Worker w's gradient is 41^w everywhere, added up (sum)
  // under SGD with rate 1: a shard's total change, in base 41, counts the gradients of each
  // worker it took. Every gradient is taken or dropped as stale, none twice, and no step waits
  // for good.
  constexpr int kSteps = 40;
  constexpr float kBase = kSteps + 1;
  for (int trial = 0; trial < 3; ++trial) {
    CAPTURE(trial);
    Servers servers(2, 4);  // worker 3 only reads at the end
    const strata::optim::Sgd sgd{1.0f};
    const auto open = [&](int rank) {
      return std::make_unique<BackupPlacement::session_type>(servers.spec, rank, 1,
                                                             strata::ps::ClientOptions{},
                                                             strata::ps::FixedShardsPartitioner{3});
    };
    const std::vector<std::size_t> sizes{10, 1, 7};
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 3; ++rank)
      threads.emplace_back([&, rank] {
        errors[static_cast<std::size_t>(rank)] = error_of([&] {
          auto session = open(rank);
          std::vector<strata::placement::ShardedVariable<float>> owned;
          for (const std::size_t size : sizes)
            owned.push_back(BackupPlacement::create<float>(*session, std::vector<float>(size, 0.0f),
                                                           VariableAggregation::sum));
          Variables variables;
          for (auto& variable : owned)
            variables.push_back(&variable);
          std::mt19937 random(static_cast<unsigned>(trial * 10 + rank));
          std::uniform_int_distribution<int> pause_us(0, 3000);
          for (int step = 0; step < kSteps; ++step) {
            std::this_thread::sleep_for(std::chrono::microseconds(pause_us(random)));
            step_all(variables, std::pow(kBase, static_cast<float>(rank)),
                     with_one_backup(rank, strata::ps::SyncSpec::Aggregation::sum), sgd);
          }
        });
      });
    for (auto& thread : threads)
      thread.join();
    for (const auto& error : errors)
      REQUIRE_MESSAGE(error.empty(), error);
    auto reader = open(3);
    std::size_t shards = 0;
    std::uint64_t taken = 0;
    for (const std::size_t size : sizes) {
      auto variable = BackupPlacement::create<float>(*reader, std::vector<float>(size, 0.0f),
                                                     VariableAggregation::sum);
      const auto values = variable.read();
      for (const auto& shard : variable.shards()) {
        ++shards;
        const auto first = values.begin() + static_cast<std::ptrdiff_t>(shard.offset);
        CHECK(std::all_of(first, first + static_cast<std::ptrdiff_t>(shard.size),
                          [&](float v) { return v == *first; }));
        REQUIRE(*first <= 0.0f);
        auto change = static_cast<std::uint64_t>(-*first);
        for (int rank = 0; rank < 3; ++rank, change /= kSteps + 1)
          taken += change % (kSteps + 1);
        CHECK(change == 0);  // no worker's gradients counted more than kSteps times
      }
    }
    reader.reset();
    std::uint64_t stale = 0;
    for (const auto& report : servers.join())
      stale += report.stale_gradients;
    CHECK(shards == 7);
    CHECK(taken + stale == 3 * kSteps * shards);
    // A gradient is dropped only from a step that took 2 others: stale <= taken / 2.
    CHECK(taken >= 2 * kSteps * shards);
  }
}
