// The ParameterServer placement against in-process parameter servers on loopback: each variable's
// update rule (the servers' optimizer, or the workers' with the servers summing), sharded or
// not, against the optimizer applied locally. The multi-process strategy tests are in
// tests/strategy/parameter_server_test.cpp.
#include <doctest/doctest.h>

#include <cstddef>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/optimizer.hpp>
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
