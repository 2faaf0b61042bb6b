// A training step's cost under local SGD against synchronous training: the ResNet-50 gradient
// list (161 tensors, 25,557,032 floats) applied with plain SGD through the list form of
// apply_gradients by the 2 replicas (threads) of one process, under
//
//   BM_Step/synchronous      sync::Synchronous: the gradients all-reduced (mean, fused into
//                            buckets) every step, then every copy updated
//   BM_Step/local_sgd_K      sync::LocalSgd<K>: every replica updates its copy with its own
//                            gradients, and every K steps the copies are averaged (fused)
//
// One benchmark iteration is 4 steps for every variant, so that LocalSgd<4>'s averaging step is
// in every figure: the time reported is that of 4 steps. The gradients hold small constants,
// so the values stay finite.
//
// Run (the dev or release preset): strata_bench_strategy_local_sgd_bench
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <strata/strategies.hpp>

#include <cstddef>
#include <exception>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include "model_gradients.hpp"

namespace {

constexpr int kReplicas = 2;
constexpr int kStepsPerIteration = 4;

template <class Sync>
using MirroredOver =
    strata::Strategy<strata::placement::Mirrored, strata::communicator::LocalCommunicator<>, Sync>;

template <class Sync>
void BM_Step(benchmark::State& state) {
  using Strategy = MirroredOver<Sync>;
  using Variable = typename Strategy::template variable_type<float>;
  Strategy strategy({.num_replicas = kReplicas});
  const auto specs = strata::bench::resnet50_gradients();
  std::vector<Variable> variables;
  variables.reserve(specs.size());
  for (const auto& spec : specs)
    variables.push_back(strategy.template create_variable<float>(std::vector<float>(spec.count)));
  // Each replica's gradient buffers, kept from step to step.
  std::vector<std::vector<std::vector<float>>> gradients(kReplicas);
  for (auto& mine : gradients)
    for (const auto& spec : specs)
      mine.emplace_back(spec.count, 1e-6f);
  const strata::optim::Sgd sgd{0.01f};
  auto step = [&](auto& ctx) {
    auto& mine = gradients[static_cast<std::size_t>(ctx.local_replica_id())];
    std::vector<strata::GradientAndVariable<float, Variable>> list;
    list.reserve(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i)
      list.push_back(strata::gradient_for(variables[i], mine[i]));
    ctx.apply_gradients(sgd, list);
  };
  try {
    for (int s = 0; s < kStepsPerIteration; ++s)
      strategy.run(step);  // warm-up: buckets planned, memory touched
    for (auto _ : state)
      for (int s = 0; s < kStepsPerIteration; ++s)
        strategy.run(step);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
}

}  // namespace

// Registered before benchmark_main's main() runs.
BENCHMARK(BM_Step<strata::sync::Synchronous>)
    ->Name("BM_Step/synchronous")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Step<strata::sync::LocalSgd<1>>)
    ->Name("BM_Step/local_sgd_1")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Step<strata::sync::LocalSgd<4>>)
    ->Name("BM_Step/local_sgd_4")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
