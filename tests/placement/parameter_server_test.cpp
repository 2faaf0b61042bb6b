// The ParameterServer placement against in-process parameter servers on loopback: each variable's
// update rule (the servers' optimizer, or the workers' with the servers summing), sharded or
// not, against the optimizer applied locally. The multi-process strategy tests are in
// tests/strategy/parameter_server_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
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

// One worker's view of `servers` in-process parameter servers.
struct Servers {
  explicit Servers(int count) : spec(strata::testing::loopback_ps_cluster(1, count)) {
    for (int s = 0; s < count; ++s)
      running.push_back(std::make_unique<strata::ps::Server>(spec, s));
    for (auto& server : running)
      threads.emplace_back([&server] { server->serve(); });
  }
  ~Servers() {
    for (auto& server : running)
      server->stop();
    for (auto& thread : threads)
      thread.join();
  }
  strata::cluster::ClusterSpec spec;
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
