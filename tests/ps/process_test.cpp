// Multi-process fault tests of the parameter servers (ps/server.hpp, ps/client.hpp): ps tasks
// and workers are real processes (tests/support/ps_task.cpp) on loopback, each with its own
// TF_CONFIG, and faults are real signals.
//   - SIGKILL of a ps task while a worker is inside a call (pulls, or push_pulls sending 1 MiB):
//     the worker raises PeerFailureError naming that ps task within 1 s of the kill; the other
//     ps task, left without workers, ends with TimeoutError naming the unfinished rank;
//   - SIGSTOP of a ps task: the worker raises TimeoutError naming it at its deadline
//     (STRATA_TIMEOUT), and after SIGCONT both ps tasks end by themselves;
//   - SIGSTOP of a worker in lockstep (bounded staleness, k = 0): the other worker raises
//     TimeoutError naming the stopped one's replica and worker, at the server's hold, before its
//     own deadline;
//   - SIGKILL of a worker mid-push: the servers serve the other worker on, with whole pushes
//     only, and return 0 once it and a restarted worker of the killed rank are done;
//   - workers with another cluster token, none, or another cluster, and connections sending
//     random bytes (before and after a valid handshake) are refused while a legitimate worker
//     trains on.
// The in-process tests of the same classes are in server_test.cpp.
#include <array>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
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
using strata::cluster::Address;
using strata::cluster::ClusterSpec;
using strata::cluster::Task;
using strata::cluster::TaskType;
using strata::testing::Process;

const std::string kTask = STRATA_TEST_PS_TASK;

constexpr int kPeerFailure = static_cast<int>(strata::ExitStatus::peer_failure);
constexpr int kTimeout = static_cast<int>(strata::ExitStatus::timeout);
constexpr int kConfiguration = static_cast<int>(strata::ExitStatus::configuration);

// Starts `task` of `spec` running `scenario`, with `environment` on top of this process's.
// `launcher` goes before the program (e.g. {"env", "-u", "NAME"}).
Process start(const ClusterSpec& spec, Task task, const std::vector<std::string>& scenario,
              std::map<std::string, std::string> environment,
              const std::vector<std::string>& launcher = {}) {
  environment["TF_CONFIG"] = strata::cluster::make_tf_config(spec, task);
  std::vector<std::string> argv = launcher;
  argv.push_back(kTask);
  argv.insert(argv.end(), scenario.begin(), scenario.end());
  return Process(argv, environment,
                 strata::testing::temp_path(fmt::format("{}{}", to_string(task.type), task.index)));
}

std::vector<Process> start_servers(const ClusterSpec& spec,
                                   const std::map<std::string, std::string>& environment) {
  std::vector<Process> servers;
  for (const auto& [index, address] : spec.tasks(TaskType::ps))
    servers.push_back(start(spec, {TaskType::ps, index}, {"serve"}, environment));
  return servers;
}

// Whether `process` printed `word` within `timeout` (false at once when it ended without).
bool wait_for_output(Process& process, std::string_view word, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    if (process.output().find(word) != std::string::npos) return true;
    if (process.wait_for(0ms)) return process.output().find(word) != std::string::npos;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

// The last "step K" a worker printed (0 before the first).
long last_step(const std::string& output) {
  const auto at = output.rfind("\nstep ");
  if (at == std::string::npos) return 0;
  return std::stol(output.substr(at + 6));
}

// What a task printed when it failed: "error CLASS CALL_MS AT_NS MESSAGE".
struct Failure {
  std::string kind;
  long long call_ms = 0;
  long long at_ns = 0;  // steady_clock (CLOCK_MONOTONIC) when the call failed
  std::string message;
};

std::optional<Failure> failure_of(const std::string& output) {
  const auto at = output.rfind("error ");
  if (at == std::string::npos) return std::nullopt;
  const auto end = output.find('\n', at);
  const std::string line = output.substr(at, end == std::string::npos ? end : end - at);
  Failure failure;
  std::array<char, 64> kind{};
  int consumed = 0;
  if (std::sscanf(line.c_str(), "error %63s %lld %lld %n", kind.data(), &failure.call_ms,
                  &failure.at_ns, &consumed) != 3)
    return std::nullopt;
  failure.kind = kind.data();
  failure.message = line.substr(static_cast<std::size_t>(consumed));
  return failure;
}

long long ns_of(Clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
}

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// "ps task N (host:port)", as clients and servers name a ps task.
std::string ps_task_name(const ClusterSpec& spec, int index) {
  return fmt::format("ps task {} ({})", index, spec.address({TaskType::ps, index}).to_string());
}

// Checks that `server`, left without workers, ends by itself with a TimeoutError naming the
// ranks that never said they were done.
void check_gives_up(Process& server, const ClusterSpec& spec, int index, std::string_view ranks) {
  CAPTURE(index);
  const bool ended = server.wait_for(8s).has_value();
  REQUIRE_MESSAGE(ended, "the ps task hangs: ", server.output());
  const std::string output = server.output();
  CHECK_MESSAGE(server.exit_code() == kTimeout, output);
  const auto failure = failure_of(output);
  REQUIRE_MESSAGE(failure, output);
  CHECK(failure->kind == "TimeoutError");
  CHECK_MESSAGE(contains(failure->message, ps_task_name(spec, index)), output);
  CHECK_MESSAGE(contains(failure->message, fmt::format("rank(s) {} of the collective group have "
                                                       "not finished",
                                                       ranks)),
                output);
}

}  // namespace

TEST_CASE(
    "SIGKILL of a ps task during a call: the worker raises PeerFailureError naming it "
    "within 1 s") {
  struct Round {
    int victim;
    bool push;  // push_pulls of 1 MiB per ps task, else pulls
    std::chrono::milliseconds delay;
  };
  const Round rounds[] = {{1, false, 0ms}, {0, false, 90ms}, {1, true, 40ms}, {0, true, 170ms}};
  for (const Round& round : rounds) {
    CAPTURE(round.victim);
    CAPTURE(round.push);
    const auto spec = strata::testing::loopback_ps_cluster(1, 2);
    // The servers give up 2 s after their last worker left; the worker's deadline is far off,
    // so that only a failure seen at once ends it in time.
    auto servers = start_servers(spec, {{"STRATA_TIMEOUT", "2s"}});
    for (auto& server : servers)
      REQUIRE_MESSAGE(wait_for_output(server, "bound", 10s), server.output());
    const std::vector<std::string> scenario =
        round.push ? std::vector<std::string>{"pushes", "0", "262144", "0"}
                   : std::vector<std::string>{"pulls", "262144"};
    auto worker = start(spec, {TaskType::worker, 0}, scenario, {{"STRATA_TIMEOUT", "20s"}});
    REQUIRE_MESSAGE(wait_for_output(worker, "ready", 10s), worker.output());
    std::this_thread::sleep_for(round.delay);

    auto& victim = servers[static_cast<std::size_t>(round.victim)];
    const auto killed_at = Clock::now();
    victim.signal(SIGKILL);
    REQUIRE(victim.wait_for(5s));
    CHECK(victim.exit_code() == -SIGKILL);
    const bool ended = worker.wait_for(5s).has_value();
    REQUIRE_MESSAGE(ended, "the worker hangs: ", worker.output());
    const std::string output = worker.output();
    CHECK_MESSAGE(worker.exit_code() == kPeerFailure, output);
    const auto failure = failure_of(output);
    REQUIRE_MESSAGE(failure, output);
    CHECK(failure->kind == "PeerFailureError");
    CHECK_MESSAGE(contains(failure->message, ps_task_name(spec, round.victim)), output);
    CHECK_MESSAGE(contains(failure->message, round.push ? "ps::push_pull" : "ps::pull"), output);
    // Seen, not waited for: well within the 20 s deadline.
    const auto after_kill = std::chrono::nanoseconds(failure->at_ns - ns_of(killed_at));
    std::printf(
        "SIGKILL of ps task %d during %s: PeerFailureError %.1f ms after the kill, "
        "failing call %lld ms\n",
        round.victim, round.push ? "push_pull" : "pull",
        std::chrono::duration<double, std::milli>(after_kill).count(), failure->call_ms);
    CHECK(after_kill >= 0ns);
    CHECK(after_kill < 1s);
    CHECK(failure->call_ms < 1000);

    // The other ps task, whose only worker is gone without saying it finished, gives up.
    if (round.victim == 1 && !round.push) check_gives_up(servers[0], spec, 0, "0");
  }
}

TEST_CASE(
    "SIGSTOP of a ps task: the worker raises TimeoutError naming it at its deadline, "
    "and nothing hangs") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 2);
  auto servers = start_servers(spec, {{"STRATA_TIMEOUT", "2s"}});
  for (auto& server : servers)
    REQUIRE_MESSAGE(wait_for_output(server, "bound", 10s), server.output());
  auto worker = start(spec, {TaskType::worker, 0}, {"pushes", "0", "262144", "0"},
                      {{"STRATA_TIMEOUT", "2s"}});
  REQUIRE_MESSAGE(wait_for_output(worker, "ready", 10s), worker.output());

  auto& stopped = servers[1];
  const auto stopped_at = Clock::now();
  stopped.signal(SIGSTOP);
  const bool ended = worker.wait_for(8s).has_value();
  if (!ended) stopped.signal(SIGCONT);
  REQUIRE_MESSAGE(ended, "the worker hangs: ", worker.output());
  const std::string output = worker.output();
  CHECK_MESSAGE(worker.exit_code() == kTimeout, output);
  const auto failure = failure_of(output);
  REQUIRE_MESSAGE(failure, output);
  CHECK(failure->kind == "TimeoutError");
  CHECK_MESSAGE(contains(failure->message,
                         fmt::format("{} did not answer within 2000 ms", ps_task_name(spec, 1))),
                output);
  const auto after_stop = std::chrono::nanoseconds(failure->at_ns - ns_of(stopped_at));
  std::printf("SIGSTOP of ps task 1: TimeoutError %.1f ms after the stop, failing call %lld ms\n",
              std::chrono::duration<double, std::milli>(after_stop).count(), failure->call_ms);
  // At the deadline of the call that was in flight: neither early nor much later.
  CHECK(failure->call_ms >= 1900);
  CHECK(failure->call_ms < 3000);
  CHECK(after_stop > 1500ms);
  CHECK(after_stop < 3500ms);

  // Continued, the stopped ps task finds its worker gone; both give up by themselves.
  stopped.signal(SIGCONT);
  check_gives_up(servers[1], spec, 1, "0");
  check_gives_up(servers[0], spec, 0, "0");
}

TEST_CASE(
    "SIGSTOP of a worker in lockstep: the other raises TimeoutError naming it at the server's "
    "hold") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  const std::map<std::string, std::string> environment{{"STRATA_TIMEOUT", "2s"}};
  auto servers = start_servers(spec, environment);
  REQUIRE_MESSAGE(wait_for_output(servers[0], "bound", 10s), servers[0].output());
  auto waiting = start(spec, {TaskType::worker, 0}, {"pushes", "0", "1024", "2", "lockstep", "2"},
                       environment);
  auto stopped = start(spec, {TaskType::worker, 1}, {"pushes", "0", "1024", "2", "lockstep", "2"},
                       environment);
  REQUIRE_MESSAGE(wait_for_output(stopped, "step 20\n", 10s), stopped.output());
  const auto stopped_at = Clock::now();
  stopped.signal(SIGSTOP);
  const bool ended = waiting.wait_for(8s).has_value();
  stopped.signal(SIGKILL);
  REQUIRE_MESSAGE(ended, "the worker hangs: ", waiting.output());
  const std::string output = waiting.output();
  CHECK_MESSAGE(waiting.exit_code() == kTimeout, output);
  const auto failure = failure_of(output);
  REQUIRE_MESSAGE(failure, output);
  CHECK(failure->kind == "TimeoutError");
  CHECK_MESSAGE(contains(failure->message, "replica 1 (worker 1) to come within 0 steps"), output);
  CHECK_MESSAGE(contains(failure->message, ps_task_name(spec, 0)), output);
  const auto after_stop = std::chrono::nanoseconds(failure->at_ns - ns_of(stopped_at));
  std::printf("SIGSTOP of worker 1: worker 0's TimeoutError %.1f ms after the stop, call %lld ms\n",
              std::chrono::duration<double, std::milli>(after_stop).count(), failure->call_ms);
  // The server's hold (2 s less 200 ms), before the worker's own deadline of 2 s.
  CHECK(failure->call_ms >= 1700);
  CHECK(failure->call_ms < 2000);
  servers[0].signal(SIGKILL);
}

TEST_CASE(
    "a worker killed mid-training does not disturb the servers: the other trains on, and "
    "they return once it and a restarted worker are done") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 2);
  const std::map<std::string, std::string> environment{{"STRATA_TIMEOUT", "5s"}};
  auto servers = start_servers(spec, environment);
  for (auto& server : servers)
    REQUIRE_MESSAGE(wait_for_output(server, "bound", 10s), server.output());
  // 512 KiB per ps task and push: the kill lands inside one, most of the time.
  auto survivor = start(spec, {TaskType::worker, 0}, {"pushes", "300", "131072", "5"}, environment);
  auto victim = start(spec, {TaskType::worker, 1}, {"pushes", "0", "131072", "0"}, environment);
  REQUIRE_MESSAGE(wait_for_output(victim, "step 20\n", 10s), victim.output());
  REQUIRE_MESSAGE(wait_for_output(survivor, "ready", 10s), survivor.output());

  victim.signal(SIGKILL);
  const long steps_at_kill = last_step(survivor.output());
  REQUIRE(victim.wait_for(5s));
  const long victim_steps = last_step(victim.output());

  // The survivor trains on to its end, every reply of whole pushes (the worker checks them).
  const bool survivor_ended = survivor.wait_for(20s).has_value();
  REQUIRE_MESSAGE(survivor_ended, "the surviving worker hangs: ", survivor.output());
  const std::string survived = survivor.output();
  CHECK_MESSAGE(survivor.exit_code() == 0, survived);
  CHECK_MESSAGE(contains(survived, "\nok\n"), survived);
  CHECK(last_step(survived) == 300);
  std::printf("worker 1 killed after %ld steps; worker 0 went on from step %ld to 300\n",
              victim_steps, steps_at_kill);
  CHECK_MESSAGE(steps_at_kill < 300, "the survivor finished before the kill: nothing was tested");

  // Rank 1 has not said it is done: the servers serve on.
  CHECK_FALSE(servers[0].wait_for(300ms));
  CHECK_FALSE(servers[1].wait_for(0ms));

  // A restarted worker 1 finds the variables with whole pushes applied, trains, and finishes.
  auto restarted = start(spec, {TaskType::worker, 1}, {"pushes", "20", "131072", "0"}, environment);
  const bool restarted_ended = restarted.wait_for(15s).has_value();
  REQUIRE_MESSAGE(restarted_ended, "the restarted worker hangs: ", restarted.output());
  const std::string again = restarted.output();
  CHECK_MESSAGE(restarted.exit_code() == 0, again);
  CHECK_MESSAGE(contains(again, "created existed 1"), again);
  CHECK_MESSAGE(contains(again, "\nok\n"), again);

  for (auto& server : servers) {
    const bool server_ended = server.wait_for(10s).has_value();
    REQUIRE_MESSAGE(server_ended, "the ps task hangs: ", server.output());
    CHECK_MESSAGE(server.exit_code() == 0, server.output());
    CHECK_MESSAGE(contains(server.output(), "served shards 1 "), server.output());
  }
}

TEST_CASE(
    "intruders are refused while a legitimate worker trains: another token, no token, "
    "another cluster, random bytes") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 1);
  const std::map<std::string, std::string> environment{{"STRATA_TIMEOUT", "5s"},
                                                       {"STRATA_CLUSTER_TOKEN", "right"}};
  auto servers = start_servers(spec, environment);
  auto& server = servers[0];
  REQUIRE_MESSAGE(wait_for_output(server, "bound", 10s), server.output());
  auto worker = start(spec, {TaskType::worker, 0}, {"pushes", "400", "65536", "5"}, environment);
  REQUIRE_MESSAGE(wait_for_output(worker, "ready", 10s), worker.output());

  // A cluster whose ps job differs (one more ps task): another cluster fingerprint.
  ClusterSpec other = spec;
  other.add({TaskType::ps, 1}, strata::testing::loopback_cluster(1).address({TaskType::worker, 0}));
  const std::vector<std::string> pushes{"pushes", "10", "65536", "0"};
  const Task rank0{TaskType::worker, 0};
  auto wrong_token =
      start(spec, rank0, pushes, {{"STRATA_TIMEOUT", "3s"}, {"STRATA_CLUSTER_TOKEN", "wrong"}});
  auto no_token =
      start(spec, rank0, pushes, {{"STRATA_TIMEOUT", "3s"}}, {"env", "-u", "STRATA_CLUSTER_TOKEN"});
  auto other_cluster =
      start(other, rank0, pushes, {{"STRATA_TIMEOUT", "3s"}, {"STRATA_CLUSTER_TOKEN", "right"}});
  auto raw = start(spec, rank0, {"garbage", "raw", "3"}, environment);
  auto frames = start(spec, rank0, {"garbage", "frames", "3"}, environment);

  struct Refused {
    Process* process;
    std::string_view why;
  };
  const Refused refused[] = {
      {&wrong_token, "the cluster tokens (STRATA_CLUSTER_TOKEN) differ"},
      {&no_token, "requires a cluster token (STRATA_CLUSTER_TOKEN) and the connector has none"},
      {&other_cluster, "cluster fingerprints differ"}};
  for (const Refused& intruder : refused) {
    Process* const process = intruder.process;
    CAPTURE(intruder.why);
    const bool ended = process->wait_for(10s).has_value();
    REQUIRE_MESSAGE(ended, "the intruder hangs: ", process->output());
    const std::string output = process->output();
    CHECK_MESSAGE(process->exit_code() == kConfiguration, output);
    const auto failure = failure_of(output);
    REQUIRE_MESSAGE(failure, output);
    CHECK(failure->kind == "ConfigurationError");
    CHECK_MESSAGE(
        contains(failure->message, fmt::format("{} refused this client: ", ps_task_name(spec, 0))),
        output);
    CHECK_MESSAGE(contains(failure->message, intruder.why), output);
    // Refused at once, not retried until the deadline.
    CHECK(failure->call_ms < 1000);
  }
  for (Process* process : {&raw, &frames}) {
    const bool ended = process->wait_for(10s).has_value();
    REQUIRE_MESSAGE(ended, "the garbage sender hangs: ", process->output());
    CHECK_MESSAGE(process->exit_code() == 0, process->output());
    CHECK_MESSAGE(contains(process->output(), "garbage dropped 3 of 3"), process->output());
  }
  const long steps_then = last_step(worker.output());
  const bool intruders_during_training = !worker.wait_for(0ms).has_value();
  CHECK_MESSAGE(intruders_during_training,
                "the worker finished before the intruders did: nothing was tested");

  const bool worker_ended = worker.wait_for(20s).has_value();
  REQUIRE_MESSAGE(worker_ended, "the worker hangs: ", worker.output());
  const std::string trained = worker.output();
  CHECK_MESSAGE(worker.exit_code() == 0, trained);
  CHECK_MESSAGE(contains(trained, "\nok\n"), trained);
  CHECK(last_step(trained) == 400);
  std::printf("intruders refused while the worker went from step %ld to 400\n", steps_then);

  const bool server_ended = server.wait_for(10s).has_value();
  REQUIRE_MESSAGE(server_ended, "the ps task hangs: ", server.output());
  CHECK_MESSAGE(server.exit_code() == 0, server.output());
  // 3 handshakes refused, 3 connections of raw bytes, 3 of garbage frames after a handshake.
  CHECK_MESSAGE(contains(server.output(), "refused 9\n"), server.output());
}
