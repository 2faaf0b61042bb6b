// Throughput of the reduction kernels (strata/core/reduce.hpp) next to std::memcpy, for every
// element type at 4 KiB (L1), 256 KiB (L2), 4 MiB (L3 on most machines) and 64 MiB (memory)
// per input.
//
//   reduce_n/<type>/<isa>/<bytes>    out = a + b, out-of-place (two inputs into a third array)
//   accumulate/<type>/<isa>/<bytes>  inout += in
//   memcpy/<bytes>                   dst = src, the ceiling for moving the same bytes
// <isa> is each instruction set the kernels are built for that this CPU runs (baseline, avx2,
// avx512 on x86-64); reduce_n and accumulate use the widest.
//
// The counter bytes_per_second counts the bytes read plus the bytes written per iteration, in
// decimal units (1 GB/s = 1e9 B/s): 3 x bytes for reduce_n (two reads, one write) and for
// accumulate (two reads, one write), 2 x bytes for memcpy (one read, one write). Cache-line
// fills caused by writes (write-allocate) are not counted, alike for all three.
//
// Run at -O3 -DNDEBUG (the CMake Release build); the kernels need no -march flag to vectorize
// for each set.
#include <strata/core/reduce.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

namespace {

constexpr std::int64_t kBytesPerInput[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};

// Small values that keep floating-point sums finite and normal however many times
// accumulate() adds them (16-bit types stop growing where x + v rounds back to x).
template <class T>
std::vector<T> pattern(std::size_t count, int seed) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(seed)) % 13) - 6;
    if constexpr (strata::is_half_precision_v<T>) {
      values[i] = T(static_cast<float>(v) * 0.125f);
    } else {
      values[i] = static_cast<T>(v);
    }
  }
  return values;
}

void set_throughput(benchmark::State& state, double bytes_moved_per_iteration) {
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_moved_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::OneK::kIs1000);
}

template <class T>
void reduce_n_sum(benchmark::State& state, strata::detail::Isa isa) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(T);
  const std::vector<T> a = pattern<T>(count, 1);
  const std::vector<T> b = pattern<T>(count, 2);
  std::vector<T> out(count);
  const T* const inputs[] = {a.data(), b.data()};
  for (auto _ : state) {
    strata::detail::reduce_n_on<T>(isa, out, inputs, strata::ReduceOp::sum);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_throughput(state, 3.0 * static_cast<double>(bytes));
}

template <class T>
void accumulate_sum(benchmark::State& state, strata::detail::Isa isa) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(T);
  std::vector<T> inout = pattern<T>(count, 1);
  const std::vector<T> in = pattern<T>(count, 2);
  for (auto _ : state) {
    strata::detail::accumulate_on<T>(isa, inout, in, strata::ReduceOp::sum);
    benchmark::DoNotOptimize(inout.data());
    benchmark::ClobberMemory();
  }
  set_throughput(state, 3.0 * static_cast<double>(bytes));
}

void copy_bytes(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::vector<unsigned char> src(bytes, 1);
  std::vector<unsigned char> dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_throughput(state, 2.0 * static_cast<double>(bytes));
}

template <class T>
void register_type() {
  const std::string type(strata::to_string(strata::data_type_of<T>));
  for (const strata::detail::Isa isa : strata::detail::kAllIsas) {
    if (isa > strata::detail::best_isa()) continue;
    const auto isa_name = strata::detail::name_of(isa);
    auto* reduce = benchmark::RegisterBenchmark(
        fmt::format("reduce_n/{}/{}", type, isa_name).c_str(), reduce_n_sum<T>, isa);
    auto* accumulate = benchmark::RegisterBenchmark(
        fmt::format("accumulate/{}/{}", type, isa_name).c_str(), accumulate_sum<T>, isa);
    for (const std::int64_t bytes : kBytesPerInput) {
      reduce->Arg(bytes);
      accumulate->Arg(bytes);
    }
  }
}

template <class... Ts>
bool register_all(strata::TypeList<Ts...>) {
  auto* copy = benchmark::RegisterBenchmark("memcpy", copy_bytes);
  for (const std::int64_t bytes : kBytesPerInput)
    copy->Arg(bytes);
  (register_type<Ts>(), ...);
  return true;
}

// Registered before benchmark_main's main() runs.
const bool kRegistered = register_all(strata::ElementTypes{});

}  // namespace
