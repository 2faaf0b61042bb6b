// The machine's ceilings for collectives over loopback TCP (benchmarks/support/ceiling.hpp):
// full-duplex TCP throughput between two processes (kernel-tuned and 1 MiB socket buffers; the
// kernel's default congestion control and reno, strata's choice within one host; arrays of
// 1 MiB, in cache, and 64 MiB, in memory),
// the 1-byte round trip with a sleeping and with a polling receiver, and single-core memcpy
// and float add bandwidth. Counters are in decimal units (1 GB/s = 1e9 B/s); round trips in
// microseconds.
//
// Run: strata_bench_transport_loopback_ceiling_bench --benchmark_repetitions=3
//        --benchmark_report_aggregates_only=true
#include <cstddef>
#include <cstdint>
#include <string>

#include <benchmark/benchmark.h>

#include "ceiling.hpp"

namespace {

constexpr std::size_t kDuplexBytes = std::size_t{512} << 20;
constexpr std::size_t kBandwidthBytes = std::size_t{64} << 20;

void BM_TcpDuplex(benchmark::State& state) {
  const int buffer = static_cast<int>(state.range(0));
  const std::string congestion = state.range(1) != 0 ? "reno" : "";
  const auto array_bytes = static_cast<std::size_t>(state.range(2)) << 20;
  double rate = 0;
  for (auto _ : state)
    rate =
        strata::bench::tcp_duplex_bytes_per_second(kDuplexBytes, buffer, congestion, array_bytes);
  state.counters["each_way_GBps"] = rate / 1e9;
}
BENCHMARK(BM_TcpDuplex)
    ->ArgNames({"socket_buffer", "reno", "array_MiB"})
    ->Args({0, 0, 1})
    ->Args({1 << 20, 0, 1})
    ->Args({0, 1, 1})
    ->Args({0, 0, 64})
    ->Args({0, 1, 64})
    ->Iterations(1)
    ->UseRealTime();

void BM_TcpRoundTrip(benchmark::State& state) {
  const bool busy_poll = state.range(0) != 0;
  double micros = 0;
  for (auto _ : state)
    micros = static_cast<double>(strata::bench::tcp_round_trip(busy_poll).count()) / 1e3;
  state.counters["rtt_us"] = micros;
}
BENCHMARK(BM_TcpRoundTrip)->ArgName("busy_poll")->Arg(0)->Arg(1)->Iterations(1)->UseRealTime();

void BM_MemcpyBandwidth(benchmark::State& state) {
  double rate = 0;
  for (auto _ : state)
    rate = strata::bench::memcpy_bytes_per_second(kBandwidthBytes);
  state.counters["GBps"] = rate / 1e9;
}
BENCHMARK(BM_MemcpyBandwidth)->Iterations(1)->UseRealTime();

void BM_AddBandwidth(benchmark::State& state) {
  double rate = 0;
  for (auto _ : state)
    rate = strata::bench::add_bytes_per_second(kBandwidthBytes);
  state.counters["GBps"] = rate / 1e9;
}
BENCHMARK(BM_AddBandwidth)->Iterations(1)->UseRealTime();

}  // namespace
