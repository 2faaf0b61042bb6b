// Loopback-TCP all_reduce (TcpCommunicator): float sum, out of place, the ring and recursive
// doubling, 2 and 4 ranks, 4 B to 256 MiB in ×4 steps. Every rank is a thread of this process
// with its own sockets on 127.0.0.1 (strata-perf --transport tcp runs them as processes).
//
// Timing and counters (algbw, busbw in decimal units): benchmarks/support/all_reduce_harness.hpp.
//
// Run (see benchmarks/RESULTS.md): strata_bench_communicator_tcp_all_reduce_bench
//   --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <strata/communicator/tcp.hpp>

#include <cstddef>
#include <cstdint>

#include <benchmark/benchmark.h>

#include "all_reduce_harness.hpp"

namespace {

using strata::communicator::TcpAllReduce;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpOptions;

void BM_TcpAllReduce(benchmark::State& state, TcpAllReduce algorithm) {
  auto group = TcpCommunicator::create(static_cast<int>(state.range(0)), {},
                                       TcpOptions{.all_reduce = algorithm});
  strata::bench::time_all_reduce(state, group, static_cast<std::size_t>(state.range(1)));
}

void sizes_and_ranks(benchmark::internal::Benchmark* benchmark, std::int64_t largest) {
  benchmark->ArgNames({"ranks", "bytes"});
  for (std::int64_t ranks : {2, 4})
    for (std::int64_t bytes = 4; bytes <= largest; bytes *= 4)
      benchmark->Args({ranks, bytes});
  benchmark->UseRealTime();
  benchmark->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_TcpAllReduce, ring, TcpAllReduce::ring)->Apply([](auto* b) {
  sizes_and_ranks(b, std::int64_t{256} << 20);
});
// Latency-optimised: small messages only (it sends the whole buffer log2(n) times).
BENCHMARK_CAPTURE(BM_TcpAllReduce, recursive_doubling, TcpAllReduce::recursive_doubling)
    ->Apply([](auto* b) { sizes_and_ranks(b, std::int64_t{1} << 20); });
// The ring's bytes in 2 log2(n) hops: medium messages.
BENCHMARK_CAPTURE(BM_TcpAllReduce, halving_doubling, TcpAllReduce::halving_doubling)
    ->Apply([](auto* b) { sizes_and_ranks(b, std::int64_t{16} << 20); });

}  // namespace
