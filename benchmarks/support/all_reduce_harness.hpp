// benchmarks/support/all_reduce_harness.hpp — timing an all_reduce over a group of ranks that
// live in this process (threads), for any communicator.
//
// Rank 0 runs on the benchmark thread inside the timed loop; ranks 1..n-1 run on helper threads
// started before it and told `state.max_iterations`, so that every rank makes the same number
// of calls (plus one untimed warm-up call each, which also faults the buffers in). Register the
// benchmark with UseRealTime(): the work is spread over threads.
//
// Counters, in decimal units (1 GB/s = 1e9 B/s), as nccl-tests reports them:
//   algbw  S / t, S the bytes of one rank's buffer;
//   busbw  algbw · 2(n-1)/n, the all-reduce bus-bandwidth factor, comparable across n.
#pragma once

#include <cstddef>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include <strata/core/reduce_op.hpp>

namespace strata::bench {

/// Times `call(0)` on the benchmark thread while helper threads call `call(r)` for ranks
/// 1..n-1 as many times (plus one untimed warm-up call on every rank). When rank 0's call
/// throws, `abort(what)` must release the helpers (they wait on rank 0) before they are joined.
/// Returns false, with the state skipped, when any rank failed.
template <class Call, class Abort>
bool time_calls_on_every_rank(benchmark::State& state, std::size_t n, Call& call, Abort&& abort) {
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
    abort(error.what());
    state.SkipWithError(error.what());
  }
  for (auto& helper : helpers)
    helper.join();
  if (failed) return false;
  for (const auto& error : helper_errors) {
    if (error) {
      state.SkipWithError("a helper rank failed");
      return false;
    }
  }
  return true;
}

/// Times a float-sum out-of-place all_reduce of `bytes` per rank over `group` (element r is
/// rank r, each with an `all_reduce(span<const float>, span<float>, ReduceOp)` and `abort`).
template <class Group>
void time_all_reduce(benchmark::State& state, Group& group, std::size_t bytes) {
  const std::size_t n = group.size();
  const std::size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> send(n, std::vector<float>(count, 1.0f));
  std::vector<std::vector<float>> recv(n, std::vector<float>(count));
  auto call = [&](std::size_t r) {
    group[r].all_reduce(std::span<const float>(send[r]), std::span(recv[r]), ReduceOp::sum);
  };
  if (!time_calls_on_every_rank(state, n, call, [&](const char* what) { group[0].abort(what); }))
    return;

  const double algbw_bytes = static_cast<double>(bytes);
  const double bus_factor = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);
  state.counters["algbw"] =
      benchmark::Counter(algbw_bytes, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
  state.counters["busbw"] =
      benchmark::Counter(algbw_bytes * bus_factor, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

}  // namespace strata::bench
