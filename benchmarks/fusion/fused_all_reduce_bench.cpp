// Gradient fusion between ranks of one host: a model's gradient list all-reduced as GradientBuckets
// (copying in and out of the trainer's buffers, or with the gradients living in the buckets),
// against one all-reduce per gradient and against one all-reduce of all the bytes at once, the
// floor fusion can reach. Lists: ResNet-50 (161 tensors, 102 MB), BERT-base (199 tensors,
// 438 MB), and 10,000 gradients of 1 KiB. Every rank is a thread of this process with its own
// TcpCommunicator on 127.0.0.1, moving the data over loopback TCP (shm:0) or through the shared
// memory co-located ranks use by default (shm:1), or through shared memory with an arena per
// rank (TcpOptions::shared_buffer_bytes, shm:2) that holds the buckets (and the one all-reduce's
// buffer), all-reduced there in place; a step makes every gradient ready in backward order, then
// waits.
// BM_Overlap adds a simulated backward pass, against which the all-reduce overlaps or not.
//
// Run (see benchmarks/RESULTS.md): strata_bench_fusion_fused_all_reduce_bench
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <strata/communicator/tcp.hpp>
#include <strata/fusion/gradient_buckets.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "all_reduce_harness.hpp"
#include "model_gradients.hpp"

namespace {

using strata::ReduceOp;
using strata::communicator::TcpCommunicator;
using strata::fusion::GradientBuckets;
using strata::fusion::GradientRef;
using strata::fusion::GradientSpec;

enum class Mode { fused, fused_in_buckets, one_all_reduce, one_per_gradient };

// The ranks (argument 0), over TCP or through shared memory, with arenas that hold `list`'s
// buckets for shm:2 (argument 1).
std::vector<TcpCommunicator> make_group(const benchmark::State& state,
                                        const std::vector<GradientSpec>& list) {
  strata::communicator::TcpOptions tcp;
  tcp.shared_memory = state.range(1) != 0;
  if (state.range(1) == 2)  // every bucket rounds up to the arena's 64-byte alignment
    tcp.shared_buffer_bytes = strata::bench::total_count(list) * sizeof(float) + 64 * list.size();
  return TcpCommunicator::create(static_cast<int>(state.range(0)), {}, tcp);
}

std::vector<GradientSpec> small_gradients() {
  return std::vector<GradientSpec>(10000, GradientSpec{strata::DataType::float32, 256});
}

void BM_Gradients(benchmark::State& state, std::vector<GradientSpec> (*model)(), Mode mode,
                  strata::fusion::Compression compression = strata::fusion::Compression::none) {
  const strata::fusion::BucketOptions options{.compression = compression};
  const auto list = model();
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const std::size_t total = strata::bench::total_count(list);
  auto group = make_group(state, list);

  // Every rank's gradients: one buffer per gradient, or one buffer for all of them (in the
  // arena where there is one).
  std::vector<std::vector<std::vector<float>>> gradients(n);
  std::vector<strata::communicator::SharedBuffer> flat(n);
  std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> buckets(n);
  for (std::size_t r = 0; r < n; ++r) {
    if (mode == Mode::one_all_reduce) {
      flat[r] = state.range(1) == 2
                    ? group[r].allocate_shared(total * sizeof(float))
                    : strata::communicator::SharedBuffer::ordinary(total * sizeof(float));
      std::ranges::fill(flat[r].as<float>(), 1.0f);
      continue;
    }
    if (mode == Mode::fused_in_buckets) {
      buckets[r] = std::make_unique<GradientBuckets<TcpCommunicator>>(group[r], list, options);
      for (std::size_t g = 0; g < list.size(); ++g) {
        auto buffer = buckets[r]->buffer<float>(g);
        std::fill(buffer.begin(), buffer.end(), 1.0f);
      }
      continue;
    }
    std::vector<GradientRef> refs;
    for (const GradientSpec& spec : list) {
      gradients[r].emplace_back(spec.count, 1.0f);
      refs.push_back(strata::fusion::gradient(std::span(gradients[r].back())));
    }
    if (mode == Mode::fused) {
      buckets[r] =
          std::make_unique<GradientBuckets<TcpCommunicator>>(group[r], std::move(refs), options);
    }
  }

  auto step = [&](std::size_t r) {
    switch (mode) {
      case Mode::fused:
      case Mode::fused_in_buckets:
        for (std::size_t g = 0; g < list.size(); ++g)
          buckets[r]->ready(g);
        buckets[r]->wait();
        break;
      case Mode::one_all_reduce:
        group[r].all_reduce(flat[r].as<float>(), ReduceOp::sum);
        break;
      case Mode::one_per_gradient:
        for (auto& gradient : gradients[r])
          group[r].all_reduce(std::span(gradient), ReduceOp::sum);
        break;
    }
  };
  if (!strata::bench::time_calls_on_every_rank(state, n, step,
                                               [&](const char* what) { group[0].abort(what); }))
    return;
  state.counters["algbw"] = benchmark::Counter(static_cast<double>(total * sizeof(float)),
                                               benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::OneK::kIs1000);
  state.counters["tensors"] = static_cast<double>(list.size());
}

// Backward simulated as device time: before gradient i is ready the rank's thread waits (as a
// CPU waits for a GPU) for ResNet-50's layer i's share of a budget, by its backward cost
// (resnet50_backward_costs), the shares adding up to the budget. The budget is the fused
// all-reduce's own time, measured once per number of ranks before the timed steps (the median
// of 5 steps), so that computing first and all-reducing after takes about twice it. With
// `overlap`, each gradient is made ready as soon as its layer is done; without, all of them
// once the whole backward is.
void BM_Overlap(benchmark::State& state, bool overlap) {
  using Clock = std::chrono::steady_clock;
  const auto list = strata::bench::resnet50_gradients();
  const auto costs = strata::bench::resnet50_backward_costs();
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  auto group = make_group(state, list);
  std::vector<std::vector<std::vector<float>>> gradients(n);
  std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> buckets(n);
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<GradientRef> refs;
    for (const GradientSpec& spec : list) {
      gradients[r].emplace_back(spec.count, 1.0f);
      refs.push_back(strata::fusion::gradient(std::span(gradients[r].back())));
    }
    buckets[r] = std::make_unique<GradientBuckets<TcpCommunicator>>(group[r], std::move(refs));
  }
  const auto all_reduce = [&](std::size_t r) {
    for (std::size_t g = 0; g < list.size(); ++g)
      buckets[r]->ready(g);
    buckets[r]->wait();
  };

  // The budget, once per number of ranks and transport, shared by both variants.
  static std::map<std::pair<std::size_t, std::int64_t>, Clock::duration> budgets;
  const std::pair<std::size_t, std::int64_t> key{n, state.range(1)};
  if (!budgets.contains(key)) {
    std::vector<Clock::duration> times;
    std::vector<std::thread> helpers;
    for (std::size_t r = 1; r < n; ++r)
      helpers.emplace_back([&, r] {
        for (int i = 0; i < 6; ++i)
          all_reduce(r);
      });
    for (int i = 0; i < 6; ++i) {
      const auto start = Clock::now();
      all_reduce(0);
      if (i > 0) times.push_back(Clock::now() - start);  // the first warms up
    }
    for (auto& helper : helpers)
      helper.join();
    std::nth_element(times.begin(), times.begin() + 2, times.end());
    budgets[key] = times[2];
  }
  const Clock::duration budget = budgets[key];
  double total_cost = 0;
  for (const double cost : costs)
    total_cost += cost;
  std::vector<Clock::duration> offsets(costs.size());  // when gradient i is done, from the start
  double done = 0;
  for (std::size_t i = 0; i < costs.size(); ++i) {
    done += costs[i];
    offsets[i] = std::chrono::duration_cast<Clock::duration>(budget * (done / total_cost));
  }

  auto step = [&](std::size_t r) {
    const auto start = Clock::now();
    for (std::size_t g = 0; g < list.size(); ++g) {
      std::this_thread::sleep_until(start + offsets[g]);  // deadlines: no drift from oversleeping
      if (overlap) buckets[r]->ready(g);
    }
    if (!overlap)
      for (std::size_t g = 0; g < list.size(); ++g)
        buckets[r]->ready(g);
    buckets[r]->wait();
  };
  if (!strata::bench::time_calls_on_every_rank(state, n, step,
                                               [&](const char* what) { group[0].abort(what); }))
    return;
  state.counters["backward_ms"] = std::chrono::duration<double, std::milli>(budget).count();
}

void two_ranks(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"ranks", "shm"})
      ->ArgsProduct({{2}, {0, 1, 2}})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

void ranks(benchmark::internal::Benchmark* benchmark) {
  two_ranks(benchmark);
  benchmark->ArgsProduct({{4}, {0, 1, 2}});
}

using strata::bench::bert_base_gradients;
using strata::bench::resnet50_gradients;

BENCHMARK_CAPTURE(BM_Gradients, resnet50_fused, resnet50_gradients, Mode::fused)->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, resnet50_fused_in_buckets, resnet50_gradients,
                  Mode::fused_in_buckets)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, resnet50_one_all_reduce, resnet50_gradients, Mode::one_all_reduce)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, resnet50_one_per_gradient, resnet50_gradients,
                  Mode::one_per_gradient)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, resnet50_fused_bfloat16, resnet50_gradients, Mode::fused,
                  strata::fusion::Compression::bfloat16)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, resnet50_fused_in_buckets_bfloat16, resnet50_gradients,
                  Mode::fused_in_buckets, strata::fusion::Compression::bfloat16)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, small10k_fused, small_gradients, Mode::fused)->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, small10k_fused_in_buckets, small_gradients, Mode::fused_in_buckets)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, small10k_one_all_reduce, small_gradients, Mode::one_all_reduce)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, small10k_one_per_gradient, small_gradients, Mode::one_per_gradient)
    ->Apply(ranks);
BENCHMARK_CAPTURE(BM_Gradients, bert_base_fused, bert_base_gradients, Mode::fused)
    ->Apply(two_ranks);
BENCHMARK_CAPTURE(BM_Gradients, bert_base_one_all_reduce, bert_base_gradients, Mode::one_all_reduce)
    ->Apply(two_ranks);

}  // namespace

BENCHMARK_CAPTURE(BM_Overlap, resnet50_backward_then_all_reduce, false)->Apply(ranks);
BENCHMARK_CAPTURE(BM_Overlap, resnet50_overlapped, true)->Apply(ranks);
