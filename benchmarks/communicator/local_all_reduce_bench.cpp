// In-process all_reduce (LocalCommunicator): float sum, out of place, both algorithms
// (AllReduceScatterGather, AllReduceReduceToOne), 2 and 4 replicas, 4 B to 256 MiB in ×4 steps.
//
// Rank 0 runs on the benchmark thread inside the timed loop; ranks 1..n-1 run on helper threads
// started once per benchmark run, before the timed loop, and told `state.max_iterations` so that
// every rank makes the same number of calls (plus one untimed warm-up call each, which also
// faults the buffers in). Times are real (wall-clock) time, since the work is spread over
// threads.
//
// Counters, in decimal units (1 GB/s = 1e9 B/s), as nccl-tests reports them:
//   algbw  S / t, S the bytes of one rank's buffer;
//   busbw  algbw · 2(n-1)/n, the all-reduce bus-bandwidth factor, comparable across n.
//
// Run (see benchmarks/RESULTS.md): strata_bench_communicator_local_all_reduce_bench
//   --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <strata/communicator/local.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

namespace {

using strata::ReduceOp;
using strata::algorithms::AllReduceReduceToOne;
using strata::algorithms::AllReduceScatterGather;
using strata::communicator::LocalCommunicator;

template <class Algorithm>
void BM_LocalAllReduce(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(state.range(1));
  const std::size_t count = bytes / sizeof(float);
  const auto n = static_cast<std::size_t>(replicas);

  auto group = LocalCommunicator<Algorithm>::create(replicas);
  std::vector<std::vector<float>> send(n, std::vector<float>(count, 1.0f));
  std::vector<std::vector<float>> recv(n, std::vector<float>(count));
  auto call = [&](std::size_t r) {
    group[r].all_reduce(std::span<const float>(send[r]), std::span(recv[r]), ReduceOp::sum);
  };

  // Helpers make the warm-up call plus exactly as many calls as the timed loop will.
  const benchmark::IterationCount iterations = state.max_iterations;
  std::vector<std::exception_ptr> helper_errors(n);
  std::vector<std::thread> helpers;
  helpers.reserve(n - 1);
  for (std::size_t r = 1; r < n; ++r) {
    helpers.emplace_back([&, r] {
      try {
        for (benchmark::IterationCount i = 0; i <= iterations; ++i)
          call(r);
      } catch (...) {
        helper_errors[r] = std::current_exception();
      }
    });
  }

  bool failed = false;
  try {
    call(0);  // warm-up
    for (auto _ : state)
      call(0);
  } catch (const std::exception& error) {
    failed = true;
    state.SkipWithError(error.what());
  }
  for (auto& helper : helpers)
    helper.join();
  if (failed) return;
  for (const auto& error : helper_errors) {
    if (error) {
      state.SkipWithError("a helper rank failed");
      return;
    }
  }

  const double algbw_bytes = static_cast<double>(bytes);
  const double bus_factor = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
  state.counters["algbw"] =
      benchmark::Counter(algbw_bytes, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
  state.counters["busbw"] =
      benchmark::Counter(algbw_bytes * bus_factor, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

void sizes_and_replicas(benchmark::internal::Benchmark* benchmark) {
  benchmark->ArgNames({"replicas", "bytes"});
  for (std::int64_t replicas : {2, 4})
    for (std::int64_t bytes = 4; bytes <= (std::int64_t{256} << 20); bytes *= 4)
      benchmark->Args({replicas, bytes});
  benchmark->UseRealTime();
  benchmark->Unit(benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BM_LocalAllReduce, AllReduceScatterGather)->Apply(sizes_and_replicas);
BENCHMARK_TEMPLATE(BM_LocalAllReduce, AllReduceReduceToOne)->Apply(sizes_and_replicas);

}  // namespace
