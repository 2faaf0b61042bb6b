// In-process all_reduce (LocalCommunicator): float sum, out of place, both algorithms
// (AllReduceScatterGather, AllReduceReduceToOne), 2 and 4 replicas, 4 B to 256 MiB in ×4 steps.
//
// Timing and counters (algbw, busbw in decimal units): benchmarks/support/all_reduce_harness.hpp.
//
// Run (see benchmarks/RESULTS.md): strata_bench_communicator_local_all_reduce_bench
//   --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <strata/communicator/local.hpp>

#include <cstddef>
#include <cstdint>

#include <benchmark/benchmark.h>

#include "all_reduce_harness.hpp"

namespace {

using strata::algorithms::AllReduceReduceToOne;
using strata::algorithms::AllReduceScatterGather;
using strata::communicator::LocalCommunicator;

template <class Algorithm>
void BM_LocalAllReduce(benchmark::State& state) {
  auto group = LocalCommunicator<Algorithm>::create(static_cast<int>(state.range(0)));
  strata::bench::time_all_reduce(state, group, static_cast<std::size_t>(state.range(1)));
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
