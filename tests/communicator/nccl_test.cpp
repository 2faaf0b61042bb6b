// Tests of strata/communicator/nccl.hpp on a GPU: real worker processes
// (tests/support/nccl_worker.cpp) on loopback, one rank each, with a TCP side group; and one
// process with a rank per GPU (threads, LocalCommunicator side group).
//   - conformance of every collective × op × element type × count {0, 1, 7, 1023, 65539,
//     1 M + 3} × root × in/out of place against the collective reference, world sizes 1-3;
//   - SIGKILL of one worker mid all-reduce: the others raise PeerFailureError naming it within
//     a second; a rank that never calls: TimeoutError naming it; mismatched counts:
//     MismatchError on every rank; no device memory left behind by a failed group;
//   - GpuMultiWorkerMirroredStrategy trains the demo over 2 processes to the parameters of
//     single-replica CPU training.
// Ranks that share a GPU are given distinct NCCL_HOSTIDs (NCCL refuses two ranks of one host on
// one device), so one GPU runs every test. Without a CUDA device the test is skipped (exit 77).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/config.hpp>

#include "process.hpp"
#include "worker_cluster.hpp"

#if STRATA_HAS_NCCL
#include <strata/communicator/local.hpp>
#include <strata/communicator/nccl.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/cuda/device.hpp>

#include "device_staging.hpp"
#include "tcp_worker_conformance.hpp"
#endif

namespace {

using namespace std::chrono_literals;
using strata::testing::loopback_cluster;

constexpr int kSkipped = 77;

#if STRATA_HAS_NCCL

// The worker program: STRATA_TEST_NCCL_WORKER from the environment (scripts/gpu-check runs a
// bundle built elsewhere), else the one this build made.
const std::string kWorker = [] {
  const char* path = std::getenv("STRATA_TEST_NCCL_WORKER");  // NOLINT(concurrency-mt-unsafe)
  return std::string(path != nullptr ? path : STRATA_TEST_NCCL_WORKER);
}();

// Ends the process as skipped: doctest has no run-time skip.
[[noreturn]] void skip(const char* reason) {
  std::fprintf(stderr, "skipped: %s\n", reason);
  std::exit(kSkipped);  // NOLINT(concurrency-mt-unsafe)
}

void need_a_device() {
  if (strata::transport::cuda::device_count() == 0) skip("no CUDA device");
}

// `n` NCCL workers; ranks share devices round-robin, each its own NCCL host id.
struct Workers : strata::testing::Workers {
  Workers(int n, const std::vector<std::string>& scenario, const std::string& timeout)
      : strata::testing::Workers(
            kWorker, loopback_cluster(n), scenario,
            {{"STRATA_TIMEOUT", timeout}, {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_DEBUG", "WARN"}},
            host_ids(n)) {}
  static std::vector<std::map<std::string, std::string>> host_ids(int n) {
    std::vector<std::map<std::string, std::string>> ids;
    for (int r = 0; r < n; ++r)
      ids.push_back({{"NCCL_HOSTID", fmt::format("strata-test-rank-{}", r)}});
    return ids;
  }
};

#endif

}  // namespace

#if STRATA_HAS_NCCL

TEST_CASE("every collective matches the reference on the GPU, world sizes 1, 2 and 3") {
  need_a_device();
  for (int n = 1; n <= 3; ++n) {
    CAPTURE(n);
    Workers workers(n, {"conformance"}, "120s");
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      auto& worker = workers.processes[static_cast<std::size_t>(r)];
      REQUIRE_MESSAGE(worker.wait_for(240s).has_value(), worker.output());
      const std::string output = worker.output();
      CHECK_MESSAGE(worker.exit_code() == 0, output);
      CHECK_MESSAGE(
          output.find(fmt::format("conformance ok: rank {} of {}", r, n)) != std::string::npos,
          output);
      MESSAGE(output.substr(output.rfind("conformance")));
    }
  }
}

TEST_CASE("one process, one rank per GPU: every collective matches the reference") {
  need_a_device();
  using strata::communicator::Collective;
  using InProcess =
      strata::communicator::NcclCommunicator<strata::communicator::LocalCommunicator<>>;
  const std::size_t counts[] = {0, 1, 7, 1023, 65539, 1048579};
  constexpr Collective kEvery[] = {Collective::all_reduce, Collective::broadcast,
                                   Collective::reduce, Collective::all_gather,
                                   Collective::reduce_scatter};
  const int gpus = strata::transport::cuda::device_count();
  auto group = InProcess::create(gpus);
  std::vector<conformance::Totals> totals(group.size());
  std::vector<std::string> errors(group.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < group.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          strata::transport::cuda::DeviceScope scope(group[r].device(), static_cast<int>(r),
                                                     "test");
          conformance::Clock::time_point began;
          conformance::run_phase(
              group[r], "nccl in process", kEvery, counts, began, totals[r],
              conformance::DeviceStaging{
                  [](InProcess& nccl, auto mine, auto all) { nccl.side().all_gather(mine, all); }});
        } catch (const std::exception& error) {
          errors[r] = error.what();
        }
      });
  }
  CHECK_THROWS_AS(InProcess::create(gpus + 1), strata::UsageError);
  for (std::size_t r = 0; r < group.size(); ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(errors[r].empty(), errors[r]);
    CHECK(totals[r].cases > 0);
    CHECK(totals[r].failed == 0);
    CHECK(totals[r].not_identical == 0);
  }
}

TEST_CASE("GpuMultiWorkerMirroredStrategy trains the demo over 2 processes") {
  need_a_device();
  Workers workers(2, {"train"}, "60s");
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    auto& worker = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(worker.wait_for(120s).has_value(), worker.output());
    const std::string output = worker.output();
    CHECK_MESSAGE(worker.exit_code() == 0, output);
    CHECK_MESSAGE(output.find(fmt::format("train ok: rank {} of 2", r)) != std::string::npos,
                  output);
  }
}

TEST_CASE("SIGKILL of one worker mid all-reduce: the others raise PeerFailureError naming it") {
  need_a_device();
  Workers workers(3, {"loop", "1000000", "1048576"}, "10s");
  REQUIRE(workers.wait_for_output("ready", 60s));
  std::this_thread::sleep_for(100ms);
  workers.processes[1].signal(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {
    CAPTURE(r);
    auto& survivor = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(survivor.wait_for(15s).has_value(), "survivor hangs: ", survivor.output());
    const auto took = std::chrono::steady_clock::now() - killed_at;
    const std::string output = survivor.output();
    CHECK_MESSAGE(survivor.exit_code() == 3, output);
    CHECK_MESSAGE(output.find("peer failure: rank 1 closed its connections") != std::string::npos,
                  output);
    CHECK_MESSAGE(took < 1s, output);
  }
}

TEST_CASE("asynchronous calls complete in call order with the right results") {
  need_a_device();
  for (int n : {1, 2}) {
    CAPTURE(n);
    Workers workers(n, {"async", "65539"}, "30s");
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      auto& worker = workers.processes[static_cast<std::size_t>(r)];
      REQUIRE_MESSAGE(worker.wait_for(60s).has_value(), worker.output());
      CHECK_MESSAGE(worker.exit_code() == 0, worker.output());
    }
  }
}

TEST_CASE("abort() from another thread releases every rank with the reason") {
  need_a_device();
  Workers workers(3, {"abort"}, "20s");
  const auto started = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {
    CAPTURE(r);
    auto& worker = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(worker.wait_for(60s).has_value(), worker.output());
    const std::string output = worker.output();
    CHECK_MESSAGE(worker.exit_code() == 3, output);
    CHECK_MESSAGE(output.find("rank 0 aborted: the trainer is shutting down") != std::string::npos,
                  output);
  }
  // Well before the 20 s deadline: the abort, not the deadline, ended the calls.
  CHECK(std::chrono::steady_clock::now() - started < 15s);
  workers.processes[1].signal(SIGKILL);
}

TEST_CASE("a rank that never calls: the others raise TimeoutError naming it") {
  need_a_device();
  Workers workers(3, {"stall"}, "3s");
  for (int r : {0, 2}) {
    CAPTURE(r);
    auto& other = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(other.wait_for(60s).has_value(), other.output());
    const std::string output = other.output();
    CHECK_MESSAGE(other.exit_code() == 4, output);
    CHECK_MESSAGE(output.find("rank 1 did not answer") != std::string::npos, output);
  }
  workers.processes[1].signal(SIGKILL);
}

TEST_CASE("mismatched counts raise MismatchError on every rank") {
  need_a_device();
  Workers workers(2, {"mismatch"}, "10s");
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    auto& worker = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(worker.wait_for(60s).has_value(), worker.output());
    const std::string output = worker.output();
    CHECK_MESSAGE(worker.exit_code() == 5, output);
    CHECK_MESSAGE(output.find("called all_reduce(count=1000") != std::string::npos, output);
  }
}

TEST_CASE("a failed group leaves no device memory behind") {
  need_a_device();
  Workers workers(2, {"leak"}, "10s");
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    auto& worker = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(worker.wait_for(60s).has_value(), worker.output());
    const std::string output = worker.output();
    REQUIRE_MESSAGE(worker.exit_code() == 0, output);
    const auto at = output.find("leaked ");
    REQUIRE_MESSAGE(at != std::string::npos, output);
    const long long leaked = std::stoll(output.substr(at + 7));
    MESSAGE("rank ", r, " leaked ", leaked, " bytes");
    // The allocator's granularity (2 MiB pages) is the most a freed buffer can still show.
    CHECK_MESSAGE(leaked <= (2 << 20), output);
  }
}

#else

TEST_CASE("the NCCL tests need STRATA_ENABLE_NCCL") {
  std::fprintf(stderr, "skipped: built without NCCL (STRATA_ENABLE_NCCL=OFF)\n");
  std::exit(kSkipped);  // NOLINT(concurrency-mt-unsafe)
}

#endif
