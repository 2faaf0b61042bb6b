// What the strategy layer (strata/strategy.hpp) adds to a gradient all-reduce: the same float
// sum, in place, over the same per-replica buffers, between the 2 replicas (threads) of one
// MirroredStrategy, i.e. LocalCommunicator<AllReduceScatterGather>, at 4 B, 64 KiB, 1 MiB and
// 16 MiB per replica.
//
//   BM_RawAllReduce/bytes:S             communicator all_reduce(span, sum) called directly; rank 0
//                                       on the benchmark thread, rank 1 on a thread of its own that
//                                       loops over the same number of calls (the baseline)
//   BM_StrategyAllReduce/bytes:S        one strategy.run() per call, each replica calling
//                                       ReplicaContext::all_reduce(sum, span): one training step
//                                       as a trainer issues it
//   BM_StrategyApplyGradients/bytes:S   one strategy.run() per call, each replica calling
//                                       apply_gradients() (the path of examples/train.cpp) for a
//                                       variable with sum aggregation and an optimizer that does
//                                       nothing, so only the Synchronous policy's path is added
//   BM_StrategyContextAllReduce/bytes:S one strategy.run() for all calls, each replica calling
//                                       ReplicaContext::all_reduce in a loop: the context alone
//
// Strategy::run does not start threads per call: replica 0 runs on the calling thread and the
// others on threads of the strategy's ReplicaPool, woken by a condition variable at each run and
// joined through another. Per-call figures of BM_Strategy{AllReduce,ApplyGradients} include that
// wake-up and join; the overhead of the strategy layer is their time over BM_RawAllReduce's at
// the same bytes (the requirement: under 2% at 1 MiB).
//
// The buffers hold zeros, so that summing in place again and again keeps every value at 0 (no
// overflow to infinity, no subnormals) and every variant reduces the same bytes. Every variant
// makes one untimed warm-up call, which also faults the buffers in. Registered per size in
// the order raw, strategy, apply_gradients, context, so that pairs run next to each other.
//
// Counters: algbw, the bytes of one replica's buffer per second, in decimal units (1 GB/s = 1e9
// B/s). Times are wall-clock (UseRealTime): the work is spread over threads.
//
// Run (the dev or release preset): strata_bench_strategy_strategy_overhead_bench
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   --benchmark_enable_random_interleaving=true
// On a machine with fewer than 3 free cores the replicas compete with other work for cores and
// the run-to-run spread grows: compare medians.
#include <strata/strategies.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include <benchmark/benchmark.h>

#include "all_reduce_harness.hpp"

namespace {

using strata::ReduceOp;
using Strategy = strata::MirroredStrategy;
using Communicator = Strategy::communicator_type;

constexpr int kReplicas = 2;
constexpr std::int64_t kBytes[] = {4, 64 << 10, 1 << 20, 16 << 20};

/// One gradient buffer per replica, allocated alike for every variant.
class Buffers {
 public:
  explicit Buffers(std::size_t bytes)
      : data_(kReplicas, std::vector<float>(bytes / sizeof(float), 0.0f)) {}
  std::span<float> of(int replica) noexcept { return data_[static_cast<std::size_t>(replica)]; }
  std::size_t count() const noexcept { return data_.front().size(); }

 private:
  std::vector<std::vector<float>> data_;
};

/// An optimizer that leaves the variable as it is: apply_gradients() then costs the
/// all-reduce plus the Synchronous policy's bookkeeping, nothing else.
struct NoUpdate {
  static constexpr std::size_t kSlots = 0;
  void apply(std::span<float> params, std::span<const float> grads,
             strata::optim::OptimizerState<float>& /*state*/) const noexcept {
    benchmark::DoNotOptimize(params.data());
    benchmark::DoNotOptimize(grads.data());
  }
};
static_assert(strata::optim::Optimizer<NoUpdate, float>);

void set_algbw(benchmark::State& state, std::size_t bytes) {
  state.counters["algbw"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

std::size_t bytes_of(const benchmark::State& state) {
  return static_cast<std::size_t>(state.range(0));
}

void BM_RawAllReduce(benchmark::State& state) {
  const std::size_t bytes = bytes_of(state);
  auto group = Communicator::create(kReplicas);
  Buffers buffers(bytes);
  auto call = [&](std::size_t rank) {
    group[rank].all_reduce(buffers.of(static_cast<int>(rank)), ReduceOp::sum);
  };
  if (!strata::bench::time_calls_on_every_rank(state, std::size_t{kReplicas}, call,
                                               [&](const char* what) { group[0].abort(what); }))
    return;
  set_algbw(state, bytes);
}

// One strategy.run(step) per iteration, after one warm-up run.
template <class Step>
void time_runs(benchmark::State& state, Strategy& strategy, Step& step) {
  try {
    strategy.run(step);
    for (auto _ : state)
      strategy.run(step);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  set_algbw(state, bytes_of(state));
}

void BM_StrategyAllReduce(benchmark::State& state) {
  Strategy strategy({.num_replicas = kReplicas});
  Buffers buffers(bytes_of(state));
  auto step = [&](Strategy::context_type& ctx) {
    ctx.all_reduce(ReduceOp::sum, buffers.of(ctx.local_replica_id()));
  };
  time_runs(state, strategy, step);
}

void BM_StrategyApplyGradients(benchmark::State& state) {
  Strategy strategy({.num_replicas = kReplicas});
  Buffers buffers(bytes_of(state));
  const std::vector<float> initial(buffers.count(), 0.0f);
  auto variable =
      strategy.create_variable<float>(initial, strata::placement::VariableAggregation::sum);
  const NoUpdate optimizer;
  auto step = [&](Strategy::context_type& ctx) {
    ctx.apply_gradients(optimizer, buffers.of(ctx.local_replica_id()), variable);
  };
  time_runs(state, strategy, step);
}

void BM_StrategyContextAllReduce(benchmark::State& state) {
  Strategy strategy({.num_replicas = kReplicas});
  Buffers buffers(bytes_of(state));
  const benchmark::IterationCount iterations = state.max_iterations;
  // Replica 0 runs on this (the benchmark's) thread, so it can drive the timed loop.
  auto steps = [&](Strategy::context_type& ctx) {
    const std::span<float> data = buffers.of(ctx.local_replica_id());
    ctx.all_reduce(ReduceOp::sum, data);  // warm-up
    if (ctx.local_replica_id() == 0) {
      for (auto _ : state)
        ctx.all_reduce(ReduceOp::sum, data);
    } else {
      for (benchmark::IterationCount i = 0; i < iterations; ++i)
        ctx.all_reduce(ReduceOp::sum, data);
    }
  };
  try {
    strategy.run(steps);
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return;
  }
  set_algbw(state, bytes_of(state));
}

bool register_all() {
  for (const std::int64_t bytes : kBytes) {
    for (auto* registered : {
             benchmark::RegisterBenchmark("BM_RawAllReduce", BM_RawAllReduce),
             benchmark::RegisterBenchmark("BM_StrategyAllReduce", BM_StrategyAllReduce),
             benchmark::RegisterBenchmark("BM_StrategyApplyGradients", BM_StrategyApplyGradients),
             benchmark::RegisterBenchmark("BM_StrategyContextAllReduce",
                                          BM_StrategyContextAllReduce),
         }) {
      registered->ArgName("bytes")->Arg(bytes)->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}

// Registered before benchmark_main's main() runs.
const bool kRegistered = register_all();

}  // namespace
