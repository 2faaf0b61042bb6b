// Checkpoint save and restore of a 1 GiB model against the disk's own speed, in the same run:
// `dd conv=fsync` writing 1 GiB is the bar for save, a `dd` sequential read of it for restore.
// Each iteration moves the whole GiB once (manual time, one iteration per repetition); run with
// repetitions and compare medians:
//
//   build/release/benchmarks/strata_bench_checkpoint_save_restore_bench
//       --benchmark_repetitions=7 --benchmark_report_aggregates_only=true   (one command)
//
// Files go to $STRATA_CHECKPOINT_BENCH_DIR (default: the working directory), which should be on
// the file system under test. Before each read (dd or restore) the page cache is dropped when
// the process may (root: /proc/sys/vm/drop_caches); the counter `cache_dropped` says whether it
// was (1) or the reads came from memory (0).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include <strata/checkpoint/checkpoint.hpp>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kTensors = 64;
constexpr std::size_t kTensorElements = std::size_t{4} << 20;  // 16 MiB of float each
constexpr std::int64_t kBytes = kTensors * kTensorElements * sizeof(float);

fs::path bench_dir() {
  const char* dir = std::getenv("STRATA_CHECKPOINT_BENCH_DIR");
  return dir != nullptr ? fs::path(dir) : fs::current_path();
}

// Writes back and drops the page cache; false when this process may not.
bool drop_page_cache() {
  ::sync();
  std::ofstream control("/proc/sys/vm/drop_caches");
  control << "3\n";
  control.flush();
  return static_cast<bool>(control);
}

void run_or_abort(const std::string& command) {
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "save_restore_bench: '%s' failed\n", command.c_str());
    std::abort();
  }
}

struct Model {
  std::vector<std::vector<float>> tensors;
  strata::checkpoint::Checkpoint checkpoint;

  Model() : tensors(kTensors, std::vector<float>(kTensorElements)) {
    for (std::size_t t = 0; t < kTensors; ++t) {
      for (std::size_t i = 0; i < kTensorElements; ++i)
        tensors[t][i] = static_cast<float>((t * 131 + i) % 1021) * 0.001f;
      checkpoint.track("layer" + std::to_string(t) + "/kernel", std::span(tensors[t]));
    }
  }
};

Model& model() {
  static Model instance;
  return instance;
}

template <class F>
void timed(benchmark::State& state, F&& body) {
  const auto start = Clock::now();
  body();
  state.SetIterationTime(std::chrono::duration<double>(Clock::now() - start).count());
}

void BM_DdWriteFsync(benchmark::State& state) {
  const fs::path file = bench_dir() / "strata_bench_dd.bin";
  for (auto _ : state)
    timed(state, [&] {
      run_or_abort("dd if=/dev/zero of='" + file.string() +
                   "' bs=16M count=64 conv=fsync status=none");
    });
  fs::remove(file);
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_CheckpointSave(benchmark::State& state) {
  const fs::path file = bench_dir() / "strata_bench_ckpt.safetensors";
  Model& m = model();
  for (auto _ : state)
    timed(state, [&] { m.checkpoint.save(file); });
  fs::remove(file);
  state.SetBytesProcessed(state.iterations() * kBytes);
}

void BM_DdRead(benchmark::State& state) {
  const fs::path file = bench_dir() / "strata_bench_dd.bin";
  run_or_abort("dd if=/dev/zero of='" + file.string() + "' bs=16M count=64 conv=fsync status=none");
  bool dropped = true;
  for (auto _ : state) {
    state.PauseTiming();
    dropped = drop_page_cache() && dropped;
    state.ResumeTiming();
    timed(state,
          [&] { run_or_abort("dd if='" + file.string() + "' of=/dev/null bs=16M status=none"); });
  }
  fs::remove(file);
  state.SetBytesProcessed(state.iterations() * kBytes);
  state.counters["cache_dropped"] = dropped ? 1 : 0;
}

void BM_CheckpointRestore(benchmark::State& state) {
  const fs::path file = bench_dir() / "strata_bench_ckpt.safetensors";
  Model& m = model();
  m.checkpoint.save(file);
  bool dropped = true;
  for (auto _ : state) {
    state.PauseTiming();
    dropped = drop_page_cache() && dropped;
    state.ResumeTiming();
    timed(state, [&] { m.checkpoint.restore(file); });
  }
  fs::remove(file);
  state.SetBytesProcessed(state.iterations() * kBytes);
  state.counters["cache_dropped"] = dropped ? 1 : 0;
}

}  // namespace

BENCHMARK(BM_DdWriteFsync)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointSave)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DdRead)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CheckpointRestore)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
