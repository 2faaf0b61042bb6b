// Multi-process tests of strata/communicator/tcp.hpp: real worker processes
// (tests/support/tcp_worker.cpp) on loopback, each with its own TF_CONFIG.
//   - SIGKILL of one worker in the middle of all-reduces: every survivor raises
//     PeerFailureError naming it well within the deadline; 20 rounds with different world
//     sizes, victims and timing, zero hangs;
//   - SIGSTOP of one worker: the others raise TimeoutError naming it;
//   - a count mismatch: MismatchError in every process; different cluster tokens: refused;
//   - workers as separate hosts in network namespaces, reached by host name (root only;
//     skipped with the reason otherwise).
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/tf_config.hpp>

#include "process.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using strata::cluster::Address;
using strata::cluster::ClusterSpec;
using strata::cluster::TaskType;
using strata::testing::loopback_cluster;
using strata::testing::Process;
using strata::testing::temp_path;

const std::string kWorker = STRATA_TEST_TCP_WORKER;

// Workers of this test run strata_test_tcp_worker.
struct Workers : strata::testing::Workers {
  Workers(const ClusterSpec& spec, const std::vector<std::string>& scenario,
          const std::map<std::string, std::string>& extra = {},
          const std::vector<std::map<std::string, std::string>>& per_rank = {})
      : strata::testing::Workers(kWorker, spec, scenario, extra, per_rank) {}
};

}  // namespace

TEST_CASE(
    "SIGKILL of one worker mid all-reduce: every survivor raises peer failure naming it, "
    "20 times") {
  for (int round = 0; round < 20; ++round) {
    const int n = 2 + round % 3;
    const int victim = (round * 7 + 1) % n;
    const auto delay = std::chrono::milliseconds((round * 37) % 250);
    CAPTURE(round);
    CAPTURE(n);
    CAPTURE(victim);
    // 256 Ki floats: an all-reduce takes long enough that the kill lands inside one.
    Workers workers(loopback_cluster(n), {"loop", "1000000", "262144"}, {{"STRATA_TIMEOUT", "2s"}});
    REQUIRE(workers.wait_for_output("ready", 10s));
    std::this_thread::sleep_for(delay);
    auto& dead = workers.processes[static_cast<std::size_t>(victim)];
    dead.signal(SIGKILL);
    const auto killed_at = std::chrono::steady_clock::now();
    REQUIRE(dead.wait_for(5s));
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      CAPTURE(r);
      auto& survivor = workers.processes[static_cast<std::size_t>(r)];
      const bool ended = survivor.wait_for(5s).has_value();
      REQUIRE_MESSAGE(ended, "survivor hangs: ", survivor.output());
      const auto took = std::chrono::steady_clock::now() - killed_at;
      const std::string output = survivor.output();
      CHECK_MESSAGE(survivor.exit_code() == 3, output);
      CHECK_MESSAGE(output.find(fmt::format("rank {} closed", victim)) != std::string::npos,
                    output);
      // Well within the 2 s deadline: a dead peer is seen, not waited for.
      CHECK(took < 1500ms);
    }
  }
}

TEST_CASE("SIGSTOP of one worker: the others raise a timeout naming it") {
  Workers workers(loopback_cluster(3), {"loop", "1000000", "65536"}, {{"STRATA_TIMEOUT", "2s"}});
  REQUIRE(workers.wait_for_output("ready", 10s));
  auto& stopped = workers.processes[1];
  stopped.signal(SIGSTOP);
  for (int r : {0, 2}) {
    CAPTURE(r);
    auto& other = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE(other.wait_for(8s));
    const std::string output = other.output();
    CHECK_MESSAGE(other.exit_code() == 4, output);
    CHECK_MESSAGE(output.find("rank 1 did not answer") != std::string::npos, output);
  }
  stopped.signal(SIGKILL);
}

TEST_CASE("a count mismatch across processes raises MismatchError in every process") {
  // The wait outlasts the deadline, so that a rank that is never told of the mismatch ends
  // with its timeout, which names what it waited for, instead of an unexplained kill.
  Workers workers(loopback_cluster(3), {"mismatch"}, {{"STRATA_TIMEOUT", "10s"}});
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    auto& p = workers.processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(p.wait_for(20s), p.output());
    CHECK_MESSAGE(p.exit_code() == 5, p.output());
  }
}

TEST_CASE("workers with different STRATA_CLUSTER_TOKEN values are refused") {
  Workers workers(loopback_cluster(2), {"join"}, {{"STRATA_TIMEOUT", "2s"}},
                  {{{"STRATA_CLUSTER_TOKEN", "right"}}, {{"STRATA_CLUSTER_TOKEN", "wrong"}}});
  for (auto& p : workers.processes)
    REQUIRE(p.wait_for(8s));
  CHECK_MESSAGE(workers.processes[1].exit_code() == 6, workers.processes[1].output());
  CHECK(workers.processes[1].output().find("tokens (STRATA_CLUSTER_TOKEN) differ") !=
        std::string::npos);
  CHECK_MESSAGE(workers.processes[0].exit_code() == 4, workers.processes[0].output());

  Workers same(loopback_cluster(2), {"join"},
               {{"STRATA_TIMEOUT", "5s"}, {"STRATA_CLUSTER_TOKEN", "right"}});
  for (auto& p : same.processes) {
    REQUIRE(p.wait_for(8s));
    CHECK_MESSAGE(p.exit_code() == 0, p.output());
  }
}

namespace {

int shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());  // NOLINT(concurrency-mt-unsafe)
}

// Two network namespaces joined by a veth pair, each with an /etc/hosts of its own
// (`ip netns exec` bind-mounts /etc/netns/NAME/hosts), so workers reach each other by name.
struct Namespaces {
  Namespaces() {
    const std::string id = std::to_string(::getpid() % 100000);
    names = {"strata-a" + id, "strata-b" + id};
    const std::string veth_a = "sva" + id;
    const std::string veth_b = "svb" + id;
    if (::geteuid() != 0) {
      skip_reason = "not root: ip netns needs CAP_SYS_ADMIN";
      return;
    }
    if (shell("ip netns add " + names[0]) != 0 || shell("ip netns add " + names[1]) != 0) {
      skip_reason = "ip netns add failed (no iproute2, or namespaces are not permitted here)";
      return;
    }
    created = true;
    const std::string hosts = "10.231.7.1 worker-a.strata.test\n10.231.7.2 worker-b.strata.test\n";
    for (const auto& name : names) {
      std::filesystem::create_directories("/etc/netns/" + name);
      std::ofstream("/etc/netns/" + name + "/hosts") << hosts;
    }
    const bool ok =
        shell(fmt::format("ip link add {} type veth peer name {}", veth_a, veth_b)) == 0 &&
        shell(fmt::format("ip link set {} netns {}", veth_a, names[0])) == 0 &&
        shell(fmt::format("ip link set {} netns {}", veth_b, names[1])) == 0 &&
        shell(fmt::format("ip netns exec {} ip addr add 10.231.7.1/24 dev {}", names[0], veth_a)) ==
            0 &&
        shell(fmt::format("ip netns exec {} ip addr add 10.231.7.2/24 dev {}", names[1], veth_b)) ==
            0 &&
        shell(fmt::format("ip netns exec {} ip link set {} up", names[0], veth_a)) == 0 &&
        shell(fmt::format("ip netns exec {} ip link set {} up", names[1], veth_b)) == 0 &&
        shell(fmt::format("ip netns exec {} ip link set lo up", names[0])) == 0 &&
        shell(fmt::format("ip netns exec {} ip link set lo up", names[1])) == 0;
    if (!ok) skip_reason = "could not set up the veth pair between the namespaces";
  }
  ~Namespaces() {
    if (!created) return;
    for (const auto& name : names) {
      shell("ip netns del " + name);
      std::error_code ignored;
      std::filesystem::remove_all("/etc/netns/" + name, ignored);
    }
  }
  std::vector<std::string> names;
  std::string skip_reason;
  bool created = false;
};

}  // namespace

TEST_CASE("workers on separate hosts (network namespaces) form a group by host name") {
  Namespaces hosts;
  if (!hosts.skip_reason.empty()) {
    MESSAGE("skipped: " << hosts.skip_reason);
    return;
  }
  ClusterSpec cluster;
  cluster.add({TaskType::worker, 0}, {"worker-a.strata.test", 23456});
  cluster.add({TaskType::worker, 1}, {"worker-b.strata.test", 23456});
  std::vector<Process> processes;
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env{
        {"TF_CONFIG", strata::cluster::make_tf_config(cluster, {TaskType::worker, r})},
        {"STRATA_TIMEOUT", "10s"}};
    processes.emplace_back(
        std::vector<std::string>{"ip", "netns", "exec", hosts.names[static_cast<std::size_t>(r)],
                                 kWorker, "loop", "20", "100003"},
        env, temp_path(fmt::format("netns{}", r)));
  }
  for (auto& p : processes) {
    REQUIRE(p.wait_for(20s));
    CHECK_MESSAGE(p.exit_code() == 0, p.output());
    CHECK(p.output().find("ok") != std::string::npos);
  }
}
