// Multi-process fault tests of the ClusterCoordinator: chief, workers and ps tasks are real
// processes (tests/support/coordinator_task.cpp) on loopback, each with its own TF_CONFIG,
// training the example problem one function per global batch; faults are real signals.
//   - a fault-free run: every step runs once, and training reaches the known solution;
//   - SIGKILL of a random worker at a random moment, 10 trials (half of them restarting it):
//     every scheduled step ends at least once (the steps that ran twice are counted), the
//     final model is within tolerance of the fault-free one, and a restarted worker rejoins;
//   - SIGKILL of a ps task: the coordinator and every worker raise PeerFailureError naming it
//     within 1 s (a worker whose function was running in that function; every worker's server
//     when the coordinator tells it);
//   - SIGSTOP of a ps task: TimeoutError naming it, at the deadline;
//   - SIGSTOP of a worker: its step goes to another worker after closure_timeout, and training
//     ends.
// The in-process tests of the same classes are in cluster_coordinator_test.cpp.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/tf_config.hpp>
#include <strata/core/error.hpp>

#include "process.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using strata::cluster::ClusterSpec;
using strata::cluster::Task;
using strata::cluster::TaskType;
using strata::testing::Process;

const std::string kTask = STRATA_TEST_COORDINATOR_TASK;
constexpr int kPeerFailure = static_cast<int>(strata::ExitStatus::peer_failure);
constexpr int kTimeout = static_cast<int>(strata::ExitStatus::timeout);
constexpr std::size_t kStepsPerEpoch = 16;  // 1024 examples, global batch 64

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// What the workers' logs say: per (epoch, step) how often it started and ended, the errors, and
// which processes built their runner.
struct Logs {
  std::map<std::pair<int, int>, int> starts;
  std::map<std::pair<int, int>, int> ends;
  std::map<int, int> builds;                       // per worker index
  std::map<int, std::vector<std::string>> errors;  // per worker index: "CLASS AT_NS MESSAGE"
  std::map<int, int> ends_by_worker;
};

Logs read_logs(const std::string& dir) {
  Logs logs;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    int worker = -1;
    if (std::sscanf(name.c_str(), "worker%d-", &worker) != 1) continue;
    std::ifstream file(entry.path());
    std::string line;
    while (std::getline(file, line)) {
      std::istringstream in(line);
      std::string word;
      in >> word;
      int epoch = 0;
      int step = 0;
      if (word == "start" && in >> epoch >> step) ++logs.starts[{epoch, step}];
      if (word == "end" && in >> epoch >> step) {
        ++logs.ends[{epoch, step}];
        ++logs.ends_by_worker[worker];
      }
      if (word == "built") ++logs.builds[worker];
      if (word == "error") logs.errors[worker].push_back(line.substr(6));
    }
  }
  return logs;
}

// A cluster of the coordinator task: chief, `workers` workers, `servers` ps tasks.
struct Cluster {
  Cluster(int workers, int servers, int epochs, int step_ms,
          std::map<std::string, std::string> environment = {})
      : spec(strata::testing::loopback_coordinator_cluster(workers, servers)),
        logs(strata::testing::temp_path("coordinator-logs")),
        scenario{kTask, std::to_string(epochs), std::to_string(step_ms), logs},
        env(std::move(environment)) {
    std::filesystem::create_directories(logs);
    for (int s = 0; s < servers; ++s)
      ps.push_back(start({TaskType::ps, s}));
    for (int w = 0; w < workers; ++w)
      this->workers.push_back(start({TaskType::worker, w}));
    chief.push_back(start({TaskType::chief, 0}));
  }
  ~Cluster() {
    for (auto* group : {&chief, &this->workers, &restarted, &ps})
      for (auto& process : *group) {
        if (process.exit_code()) continue;  // reaped: its pid may be another process's now
        process.signal(SIGCONT);
        if (!process.wait_for(10s)) {
          process.signal(SIGKILL);
          process.wait_for(5s);
        }
      }
    std::error_code ignored;
    std::filesystem::remove_all(logs, ignored);
  }

  Process start(Task task) {
    auto environment = env;
    environment["TF_CONFIG"] = strata::cluster::make_tf_config(spec, task);
    return Process(scenario, environment,
                   strata::testing::temp_path(fmt::format("{}{}", task.type, task.index)));
  }

  // Waits until worker `index`'s logs hold `count` ends in all (at most `timeout`).
  bool wait_for_ends(int index, int count, std::chrono::milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
      if (read_logs(logs).ends_by_worker[index] >= count) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  ClusterSpec spec;
  std::string logs;
  std::vector<std::string> scenario;
  std::map<std::string, std::string> env;
  std::vector<Process> ps;
  std::vector<Process> workers;
  std::vector<Process> restarted;  // workers started again after a kill
  std::vector<Process> chief;      // one
};

// The exit code of `process` once it ended within `timeout`.
std::optional<int> exit_of(Process& process, std::chrono::milliseconds timeout) {
  process.wait_for(timeout);
  return process.exit_code();
}

std::vector<float> params_of(const std::string& output) {
  std::vector<float> params;
  std::istringstream in(strata::testing::line_after(output, "params"));
  std::string word;
  while (in >> word)
    params.push_back(std::stof(word));
  return params;
}

std::map<std::string, std::uint64_t> report_of(const std::string& output) {
  std::map<std::string, std::uint64_t> report;
  std::istringstream in(strata::testing::line_after(output, "report"));
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value)
    report[key] = value;
  return report;
}

}  // namespace

TEST_CASE("a coordinated run without faults runs every step once and reaches the solution") {
  Cluster cluster(3, 1, 30, 1);
  auto& chief = cluster.chief.front();
  REQUIRE(exit_of(chief, 60s) == 0);
  INFO(chief.output());
  CHECK(std::stof(strata::testing::line_after(chief.output(), "error")) < 1e-3f);
  const auto report = report_of(chief.output());
  CHECK(report.at("scheduled") == 30 * kStepsPerEpoch);
  CHECK(report.at("succeeded") == 30 * kStepsPerEpoch);
  CHECK(report.at("retried") == 0);
  CHECK(report.at("worker_failures") == 0);
  CHECK(report.at("connections") == 3);
  for (auto& worker : cluster.workers)
    CHECK(exit_of(worker, 10s) == 0);
  CHECK(exit_of(cluster.ps.front(), 10s) == 0);
  const Logs logs = read_logs(cluster.logs);
  CHECK(logs.ends.size() == 30 * kStepsPerEpoch);
  for (const auto& [step, count] : logs.ends)
    CHECK(count == 1);
  CHECK(logs.ends_by_worker.size() == 3);  // every worker took part
  for (const auto& [worker, count] : logs.builds)
    CHECK(count == 1);
}

TEST_CASE("killing a worker at a random moment loses no step (10 trials)") {
  constexpr int kEpochs = 30;
  std::vector<float> reference;
  {
    Cluster cluster(3, 1, kEpochs, 1);
    REQUIRE(exit_of(cluster.chief.front(), 60s) == 0);
    reference = params_of(cluster.chief.front().output());
  }
  REQUIRE(reference.size() == 9);
  std::mt19937 random(20261127);
  int twice_total = 0;
  int rejoined = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const int victim = std::uniform_int_distribution<int>(0, 2)(random);
    const int after = std::uniform_int_distribution<int>(1, 60)(random);
    const bool restart = trial % 2 == 0;
    const auto pause = std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 60)(random));
    CAPTURE(trial);
    CAPTURE(victim);
    CAPTURE(after);
    CAPTURE(restart);
    Cluster cluster(3, 1, kEpochs, 1);
    REQUIRE(cluster.wait_for_ends(victim, after, 30s));
    auto& killed = cluster.workers[static_cast<std::size_t>(victim)];
    killed.signal(SIGKILL);
    killed.wait_for(5s);
    if (restart) {
      std::this_thread::sleep_for(pause);
      cluster.restarted.push_back(cluster.start({TaskType::worker, victim}));
    }
    auto& chief = cluster.chief.front();
    const auto chief_end = exit_of(chief, 60s);
    const auto report = report_of(chief.output());
    const Logs logs = read_logs(cluster.logs);
    int twice = 0;
    for (const auto& [step, count] : logs.starts)
      twice += count > 1 ? 1 : 0;
    twice_total += twice;
    // Before the chief's output joins the context: a trial that passes logs one line, so that a
    // failing one stays in view in a truncated CI log.
    MESSAGE(
        fmt::format("trial {}: worker {} killed after {} steps{}; {} step(s) started twice, "
                    "{} retried, {} connections",
                    trial, victim, after, restart ? ", restarted" : "", twice,
                    report.contains("retried") ? report.at("retried") : 0,
                    report.contains("connections") ? report.at("connections") : 0));
    INFO(chief.output());
    REQUIRE(chief_end == 0);
    CHECK(report.at("succeeded") == kEpochs * kStepsPerEpoch);
    CHECK(report.at("worker_failures") >= 1);
    CHECK(logs.ends.size() == kEpochs * kStepsPerEpoch);  // every step ended at least once
    if (restart && logs.builds.at(victim) >= 2) {
      ++rejoined;  // the restarted process built its runner: it got functions again
      CHECK(report.at("connections") >= 4);
    }
    CHECK(std::stof(strata::testing::line_after(chief.output(), "error")) < 1e-3f);
    const auto params = params_of(chief.output());
    REQUIRE(params.size() == reference.size());
    for (std::size_t j = 0; j < params.size(); ++j)
      CHECK(std::abs(params[j] - reference[j]) < 1e-3f);
    // The survivors end when told; a worker that never came back leaves the ps waiting.
    for (int w = 0; w < 3; ++w)
      if (w != victim) CHECK(exit_of(cluster.workers[static_cast<std::size_t>(w)], 10s) == 0);
    if (restart && logs.builds.at(victim) >= 2) CHECK(exit_of(cluster.restarted.front(), 10s) == 0);
    if (!restart) cluster.ps.front().signal(SIGKILL);
  }
  MESSAGE(
      fmt::format("{} step(s) ran twice over the 10 trials; {} of 5 restarted workers "
                  "rejoined",
                  twice_total, rejoined));
  CHECK(rejoined >= 1);
}

TEST_CASE("killing a ps task raises PeerFailureError naming it on the coordinator and workers") {
  Cluster cluster(2, 2, 100000, 2);
  REQUIRE(cluster.wait_for_ends(0, 5, 30s));
  REQUIRE(cluster.wait_for_ends(1, 5, 30s));
  const auto killed_at = now_ns();
  cluster.ps[1].signal(SIGKILL);
  auto& chief = cluster.chief.front();
  const auto chief_end = exit_of(chief, 10s);
  INFO(chief.output());
  INFO(cluster.workers[0].output());
  INFO(cluster.workers[1].output());
  REQUIRE(chief_end == kPeerFailure);
  const std::string error = strata::testing::line_after(chief.output(), "error");
  INFO(chief.output());
  CHECK(error.rfind("PeerFailureError", 0) == 0);
  CHECK(error.find("ps task 1 (127.0.0.1") != std::string::npos);
  const auto at = std::stoll(error.substr(error.find(' ') + 1));
  CHECK(at - killed_at < 1'000'000'000);
  // Every worker's server raises it, busy or idle at the kill: the coordinator tells them.
  for (auto& worker : cluster.workers) {
    INFO(worker.output());
    CHECK(exit_of(worker, 10s) == kPeerFailure);
    const std::string raised = strata::testing::line_after(worker.output(), "error");
    CHECK(raised.rfind("PeerFailureError", 0) == 0);
    CHECK(raised.find("ps task 1 (127.0.0.1") != std::string::npos);
    CHECK(std::stoll(raised.substr(raised.find(' ') + 1)) - killed_at < 1'000'000'000);
  }
  // The workers whose function was running raised it in the function first.
  const Logs logs = read_logs(cluster.logs);
  REQUIRE_FALSE(logs.errors.empty());
  for (const auto& [w, errors] : logs.errors) {
    CAPTURE(w);
    const std::string& first = errors.front();
    CHECK(first.rfind("PeerFailureError", 0) == 0);
    CHECK(first.find("ps task 1 (127.0.0.1") != std::string::npos);
    CHECK(std::stoll(first.substr(first.find(' ') + 1)) - killed_at < 1'000'000'000);
  }
}

TEST_CASE("a stopped ps task is a TimeoutError naming it, at the deadline") {
  Cluster cluster(2, 1, 100000, 2, {{"STRATA_TIMEOUT", "1s"}});
  REQUIRE(cluster.wait_for_ends(0, 5, 30s));
  const auto stopped_at = now_ns();
  cluster.ps[0].signal(SIGSTOP);
  auto& chief = cluster.chief.front();
  REQUIRE(exit_of(chief, 10s) == kTimeout);
  const std::string error = strata::testing::line_after(chief.output(), "error");
  INFO(chief.output());
  CHECK(error.rfind("TimeoutError", 0) == 0);
  CHECK(error.find("ps task 0 (127.0.0.1") != std::string::npos);
  const auto waited = std::stoll(error.substr(error.find(' ') + 1)) - stopped_at;
  CHECK(waited > 900'000'000);
  CHECK(waited < 4'000'000'000);
  cluster.ps[0].signal(SIGCONT);
}

TEST_CASE("a stopped worker's step goes to another worker after closure_timeout") {
  // STRATA_TIMEOUT also bounds every ps call of the running workers: 1 s was exceeded under
  // ASan beside other multi-process tests on 2 cores (CI), failing the run this test expects
  // to succeed. closure_timeout is twice it: 8 s.
  Cluster cluster(3, 1, 16, 1, {{"STRATA_TIMEOUT", "4s"}});
  REQUIRE(cluster.wait_for_ends(0, 3, 30s));
  cluster.workers[0].signal(SIGSTOP);
  auto& chief = cluster.chief.front();
  const auto chief_end = exit_of(chief, 60s);
  INFO(chief.output());
  INFO(cluster.workers[1].output());
  INFO(cluster.workers[2].output());
  INFO(cluster.ps[0].output());
  REQUIRE(chief_end == 0);
  const auto report = report_of(chief.output());
  CHECK(report.at("succeeded") == 16 * kStepsPerEpoch);
  CHECK(report.at("worker_failures") >= 1);
  CHECK(report.at("retried") >= 1);
  CHECK(std::stof(strata::testing::line_after(chief.output(), "error")) < 1e-3f);
  cluster.workers[0].signal(SIGCONT);
}
