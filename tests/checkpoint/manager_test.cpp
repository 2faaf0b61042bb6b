// CheckpointManager: retention, the index, cleanup after a writer that died, SIGKILL at random
// points of saves (the index always names complete checkpoints), and a full or read-only file
// system (a tmpfs in a mount namespace the test makes) leaving the previous checkpoint intact.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/checkpoint/manager.hpp>
#include <strata/core/error.hpp>

namespace {

namespace fs = std::filesystem;
using strata::CheckpointError;
using strata::checkpoint::Checkpoint;
using strata::checkpoint::CheckpointManager;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("strata_manager_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
};

// The model of a step: values that differ in every element from step to step.
std::vector<float> model_at(std::int64_t step, std::size_t n) {
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(step) * 1000.0f + static_cast<float>(i % 997);
  return values;
}

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

// Step `step`'s model and the step itself, tracked as "model" and "step". Set in place: the
// checkpoint holds spans of them.
struct Model {
  std::vector<float> values;
  std::int64_t step = 0;
  Checkpoint checkpoint;

  Model(std::int64_t at, std::size_t n) : values(model_at(at, n)), step(at) {
    checkpoint.track("model", std::span(values));
    checkpoint.track("step", step);
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void set(std::int64_t at) {
    const auto model = model_at(at, values.size());
    std::copy(model.begin(), model.end(), values.begin());
    step = at;
  }
  bool holds(std::int64_t at) const { return step == at && values == model_at(at, values.size()); }
};

// The newest step the index of `dir` names (0: none yet). The index is written atomically, so
// reading it while the writer runs is safe.
std::int64_t latest_step(const fs::path& dir) {
  const auto latest = CheckpointManager(dir).latest();
  return latest ? latest->step : 0;
}

// Restores `path` and checks it is exactly what step `step` saved.
void check_complete(const fs::path& path, std::int64_t step, std::size_t n) {
  Model model(-1, n);
  model.checkpoint.restore(path);
  CHECK(model.holds(step));
}

// Saves steps 1, 2, ... until killed.
[[noreturn]] void save_forever(const fs::path& dir, std::size_t n) {
  CheckpointManager manager(dir, 3);
  Model model(0, n);
  for (std::int64_t step = 1;; ++step) {
    model.set(step);
    manager.save(model.checkpoint, step);
  }
}

}  // namespace

TEST_CASE("retention keeps the newest max_to_keep and every keep_every_n-th") {
  Scratch scratch;
  CheckpointManager manager(scratch.dir, 2, 5);
  CHECK_FALSE(manager.latest().has_value());
  Model model(0, 10);
  CHECK_FALSE(manager.restore_latest(model.checkpoint).has_value());
  for (std::int64_t step = 1; step <= 12; ++step) {
    model.set(step);
    CHECK(manager.save(model.checkpoint, step) ==
          scratch.dir / fmt::format("ckpt-{}.safetensors", step));
  }
  std::vector<std::int64_t> kept;
  for (const auto& entry : manager.checkpoints())
    kept.push_back(entry.step);
  CHECK(kept == std::vector<std::int64_t>{5, 10, 11, 12});
  CHECK(files_in(scratch.dir) == std::set<std::string>{"checkpoint", "ckpt-5.safetensors",
                                                       "ckpt-10.safetensors", "ckpt-11.safetensors",
                                                       "ckpt-12.safetensors"});
  for (const std::int64_t s : kept)
    check_complete(scratch.dir / fmt::format("ckpt-{}.safetensors", s), s, 10);

  // Another manager (a worker reading the chief's directory) sees the same, and restores.
  const CheckpointManager reader(scratch.dir);
  REQUIRE(reader.latest().has_value());
  CHECK(reader.latest()->step == 12);
  model.set(0);
  CHECK(reader.restore_latest(model.checkpoint) == 12);
  CHECK(model.holds(12));

  // Saving a step again replaces it and makes it the latest.
  model.set(100);
  manager.save(model.checkpoint, 11);
  CHECK(manager.latest()->step == 11);
  check_complete(scratch.dir / "ckpt-11.safetensors", 100, 10);

  CHECK_THROWS_AS(CheckpointManager(scratch.dir, 0), strata::UsageError);
  CHECK_THROWS_AS(manager.save(model.checkpoint, -1), strata::UsageError);
}

TEST_CASE("a damaged index is a CheckpointError, and cannot point outside the directory") {
  Scratch scratch;
  const CheckpointManager manager(scratch.dir);
  std::ofstream(scratch.dir / "checkpoint") << "{not json";
  CHECK_THROWS_WITH_AS(manager.latest(), doctest::Contains("the index"), CheckpointError);
  std::ofstream(scratch.dir / "checkpoint", std::ios::trunc)
      << R"({"format": "strata-checkpoint-index-1", "checkpoints": [{"step": 1, "file": "../../etc/passwd"}]})";
  CHECK_THROWS_WITH_AS(manager.latest(), doctest::Contains("not ckpt-1.safetensors"),
                       CheckpointError);
}

TEST_CASE("a save removes what a writer that died left behind, and nothing else") {
  Scratch scratch;
  std::ofstream(scratch.dir / "ckpt-99.safetensors") << "orphan: written, never indexed";
  // A temporary file of a process that no longer exists, and one of a live process (pid 1).
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = fmt::format(".strata-tmp.ckpt-3.safetensors.{}", dead);
  std::ofstream(scratch.dir / stale) << "partial";
  std::ofstream(scratch.dir / ".strata-tmp.ckpt-4.safetensors.1") << "another writer's";
  std::ofstream(scratch.dir / "notes.txt") << "the user's";

  CheckpointManager manager(scratch.dir, 1);
  const Model model(1, 8);
  manager.save(model.checkpoint, 1);
  CHECK(files_in(scratch.dir) == std::set<std::string>{"checkpoint", "ckpt-1.safetensors",
                                                       ".strata-tmp.ckpt-4.safetensors.1",
                                                       "notes.txt"});
}

TEST_CASE("SIGKILL at random points of saves: latest() is always a complete saved checkpoint") {
  Scratch scratch;
  constexpr int kTrials = 100;
  constexpr std::size_t kElements = 16 * 1024;  // 64 KiB per checkpoint
  std::mt19937 random(20261127);
  int with_checkpoint = 0;
  int expected_with_checkpoint = 0;
  int with_partial_file = 0;
  std::int64_t steps = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    const fs::path dir = scratch.dir / std::to_string(trial);
    fs::create_directories(dir);
    const pid_t writer = ::fork();
    REQUIRE(writer >= 0);
    if (writer == 0) {
      try {
        save_forever(dir, kElements);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "writer: %s\n", e.what());
      }
      ::_exit(3);
    }
    // Where the kill lands is counted in saves, not in time, so that a slow disk moves it
    // without emptying the trials: after `saves` complete saves (0: during the first), plus a
    // random part of a save's time.
    const int saves = std::uniform_int_distribution<int>(0, 4)(random);
    while (latest_step(dir) < saves && ::waitpid(writer, nullptr, WNOHANG) == 0)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(random)));
    if (saves > 0) ++expected_with_checkpoint;
    ::kill(writer, SIGKILL);
    int status = 0;
    ::waitpid(writer, &status, 0);
    REQUIRE_MESSAGE(WIFSIGNALED(status), "the writer ended by itself: status ", status);

    for (const auto& name : files_in(dir))
      if (name.starts_with(".strata-tmp.")) ++with_partial_file;
    const CheckpointManager manager(dir, 3);
    const auto latest = manager.latest();
    if (!latest) continue;  // killed before its first save completed
    ++with_checkpoint;
    steps += latest->step;
    check_complete(latest->path, latest->step, kElements);
    for (const auto& entry : manager.checkpoints())
      check_complete(entry.path, entry.step, kElements);
  }
  MESSAGE(with_checkpoint, " of ", kTrials, " trials had a checkpoint (latest step ",
          with_checkpoint ? steps / with_checkpoint : 0, " on average); ", with_partial_file,
          " were killed with a temporary file in progress");
  CHECK(with_checkpoint >= expected_with_checkpoint);
}

TEST_CASE("a full or read-only file system is a CheckpointError; the last checkpoint survives") {
  Scratch scratch;
  // The tmpfs exists only in the child's mount namespace; the child reports by its exit status.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    const bool mounted = ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                         ::mount("tmpfs", scratch.dir.c_str(), "tmpfs", 0, "size=512k") == 0;
    if (!mounted) ::_exit(77);
    int failures = 0;
    const auto expect = [&](bool condition, const char* what) {
      if (!condition) {
        std::fprintf(stderr, "disk full test: %s\n", what);
        ++failures;
      }
    };
    try {
      CheckpointManager manager(scratch.dir, 3);
      Model model(1, 1000);
      manager.save(model.checkpoint, 1);
      const Model too_big(2, 256 * 1024);  // 1 MiB: more than the tmpfs holds
      try {
        manager.save(too_big.checkpoint, 2);
        expect(false, "a save larger than the file system succeeded");
      } catch (const CheckpointError& e) {
        expect(std::string(e.what()).find("No space left on device") != std::string::npos,
               e.what());
        expect(std::string(e.what()).find("free space") != std::string::npos, e.what());
      }
      expect(manager.latest().has_value() && manager.latest()->step == 1, "latest is not 1");
      expect(files_in(scratch.dir) == std::set<std::string>{"checkpoint", "ckpt-1.safetensors"},
             "the failed save left files behind");

      if (::mount(nullptr, scratch.dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0)
        ::_exit(77);
      model.set(3);
      try {
        manager.save(model.checkpoint, 3);
        expect(false, "a save to a read-only file system succeeded");
      } catch (const CheckpointError& e) {
        expect(std::string(e.what()).find("Read-only file system") != std::string::npos, e.what());
      }
      Model restored(0, 1000);
      expect(manager.restore_latest(restored.checkpoint) == 1, "restore_latest is not 1");
      expect(restored.holds(1), "step 1 is not intact");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "disk full test: %s\n", e.what());
      ++failures;
    }
    ::_exit(failures == 0 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    MESSAGE("not run: no mount namespace (needs root or CAP_SYS_ADMIN)");
    return;
  }
  CHECK(WEXITSTATUS(status) == 0);
}
