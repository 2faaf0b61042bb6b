// Multi-host tests of strata/communicator/tcp.hpp: strata_test_tcp_worker processes in two
// network namespaces of their own, joined by a veth pair, find each other by host name:
//   - one worker per namespace all-reduces over TCP;
//   - two workers per namespace, ranks interleaved across them (0 and 2 in one, 1 and 3 in the
//     other), run the conformance sweep: shared memory inside each namespace, TCP between; and
//     all-reduce in a loop until one of them is killed: every survivor, on either side, raises
//     PeerFailureError naming it.
// Needs root and iproute2; otherwise the executable prints why and exits with kSkipped, which
// ctest reports as skipped (SKIP_RETURN_CODE in tests/CMakeLists.txt) rather than passed.
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/tf_config.hpp>

#include "process.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using strata::cluster::ClusterSpec;
using strata::cluster::TaskType;
using strata::testing::Process;
using strata::testing::temp_path;

const std::string kWorker = STRATA_TEST_TCP_WORKER;

// The exit code that tells ctest the test was skipped (the autotools convention).
constexpr int kSkipped = 77;

int shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str());  // NOLINT(concurrency-mt-unsafe)
}

// Two network namespaces joined by a veth pair, each with an /etc/hosts of its own
// (`ip netns exec` bind-mounts /etc/netns/NAME/hosts), so workers reach each other by name.
struct Namespaces {
  Namespaces() {
    const std::string id = std::to_string(::getpid() % 100000);
    names = {"strata-a" + id, "strata-b" + id};
    veth_a = "sva" + id;
    const std::string veth_b = "svb" + id;
    if (::geteuid() != 0) {
      skip_reason = "not root: ip netns needs CAP_SYS_ADMIN";
      return;
    }
    if (shell("ip netns add " + names[0]) != 0) {
      skip_reason = "ip netns add failed (no iproute2, or namespaces are not permitted here)";
      return;
    }
    created = true;
    if (shell("ip netns add " + names[1]) != 0) {
      skip_reason = "ip netns add failed (no iproute2, or namespaces are not permitted here)";
      return;
    }
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
  Namespaces(const Namespaces&) = delete;
  Namespaces& operator=(const Namespaces&) = delete;
  ~Namespaces() {
    if (!created) return;
    // A pair that never left the root namespace outlives the namespaces; deleting one end
    // deletes both (and fails harmlessly when the pair went away with them).
    shell("ip link del " + veth_a);
    for (const auto& name : names) {
      shell("ip netns del " + name);
      std::error_code ignored;
      std::filesystem::remove_all("/etc/netns/" + name, ignored);
    }
  }
  std::vector<std::string> names;
  std::string veth_a;
  std::string skip_reason;
  bool created = false;
};

// Ends the process as skipped. doctest has no run-time skip, and a test that returns early
// would be reported as passed.
[[noreturn]] void skip(const std::string& reason) {
  std::fprintf(stderr, "skipped: %s\n", reason.c_str());
  std::exit(kSkipped);  // NOLINT(concurrency-mt-unsafe)
}

// Two workers, one in each namespace, join by host name and all-reduce.
void run_across(const Namespaces& hosts) {
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

// Four workers as run_mixed places them, with `scenario`.
std::vector<Process> mixed_workers(const Namespaces& hosts,
                                   const std::vector<std::string>& scenario,
                                   const std::string& timeout, const std::string& name) {
  ClusterSpec cluster;
  for (int r = 0; r < 4; ++r)
    cluster.add({TaskType::worker, r},
                {r % 2 == 0 ? "worker-a.strata.test" : "worker-b.strata.test",
                 static_cast<std::uint16_t>(23456 + r / 2)});
  std::vector<Process> processes;
  for (int r = 0; r < 4; ++r) {
    std::map<std::string, std::string> env{
        {"TF_CONFIG", strata::cluster::make_tf_config(cluster, {TaskType::worker, r})},
        {"STRATA_TIMEOUT", timeout}};
    std::vector<std::string> argv{"ip", "netns", "exec",
                                  hosts.names[static_cast<std::size_t>(r % 2)], kWorker};
    argv.insert(argv.end(), scenario.begin(), scenario.end());
    processes.emplace_back(argv, env, temp_path(fmt::format("{}{}", name, r)));
  }
  return processes;
}

// The mixed cluster all-reducing 1 MiB in a loop with deadline `timeout`, once every worker is
// in the loop over shared memory.
std::vector<Process> mixed_loop(const Namespaces& hosts, const std::string& timeout,
                                const std::string& name) {
  auto processes = mixed_workers(hosts, {"loop", "1000000", "262144"}, timeout, name);
  const auto until = std::chrono::steady_clock::now() + 20s;
  for (auto& p : processes)
    while (p.output().find("ready") == std::string::npos &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
  for (auto& p : processes)
    REQUIRE_MESSAGE(p.output().find("transport shm") != std::string::npos, p.output());
  return processes;
}

// The mixed cluster all-reduces 1 MiB in a loop; rank 2 (sharing memory with rank 0, reaching
// 1 and 3 over TCP through rank 0) is killed: all three survivors name it, well within the
// deadline.
void run_mixed_kill(const Namespaces& hosts) {
  auto processes = mixed_loop(hosts, "5s", "netns-kill");
  processes[2].signal(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  for (int r : {0, 1, 3}) {
    CAPTURE(r);
    auto& survivor = processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(survivor.wait_for(10s), survivor.output());
    const std::string output = survivor.output();
    CHECK_MESSAGE(survivor.exit_code() == 3, output);
    CHECK_MESSAGE(output.find("rank 2 closed its connections") != std::string::npos, output);
    CHECK(std::chrono::steady_clock::now() - killed_at < 4s);
  }
}

// The mixed cluster as above; rank 2 is stopped (SIGSTOP) inside a call: every other rank
// raises a timeout that names it, within the deadline and a margin, whether it waited for rank
// 2 itself (rank 0, in their region) or for ranks that wait for it (1 and 3, over TCP and in
// the other region).
void run_mixed_stop(const Namespaces& hosts) {
  auto processes = mixed_loop(hosts, "2s", "netns-stop");
  processes[2].signal(SIGSTOP);
  const auto stopped_at = std::chrono::steady_clock::now();
  for (int r : {0, 1, 3}) {
    CAPTURE(r);
    auto& other = processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(other.wait_for(10s), other.output());
    const std::string output = other.output();
    CHECK_MESSAGE(other.exit_code() == 4, output);
    CHECK_MESSAGE(output.find("rank 2 did not answer") != std::string::npos, output);
    CHECK(std::chrono::steady_clock::now() - stopped_at < 6s);
  }
  processes[2].signal(SIGKILL);
}

// Four workers, ranks 0 and 2 in the first namespace and 1 and 3 in the second, run the
// conformance sweep: the ranks of a namespace share memory, the namespaces talk over TCP.
void run_mixed(const Namespaces& hosts) {
  auto processes = mixed_workers(hosts, {"conformance", "16387"}, "30s", "netns-mixed");
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    auto& p = processes[static_cast<std::size_t>(r)];
    REQUIRE_MESSAGE(p.wait_for(120s), p.output());
    const std::string output = p.output();
    CHECK_MESSAGE(p.exit_code() == 0, output);
    // The process conformance test's count for 4 ranks: shared memory, then three TCP phases.
    CHECK_MESSAGE(output.find(fmt::format("conformance ok: rank {} of 4, 6404 cases", r)) !=
                      std::string::npos,
                  output);
  }
}

}  // namespace

TEST_CASE(
    "two ranks on each of two hosts: shared memory inside a host, TCP between; a rank killed, a "
    "rank stopped") {
  std::string skip_reason;
  {
    Namespaces hosts;
    skip_reason = hosts.skip_reason;
    if (skip_reason.empty()) {
      run_mixed(hosts);
      run_mixed_kill(hosts);
      run_mixed_stop(hosts);
    }
  }
  if (!skip_reason.empty()) skip(skip_reason);
}

TEST_CASE("workers on separate hosts (network namespaces) form a group by host name") {
  std::string skip_reason;
  {
    Namespaces hosts;
    skip_reason = hosts.skip_reason;
    if (skip_reason.empty()) run_across(hosts);
  }  // the namespaces are gone before a skip ends the process (std::exit unwinds nothing)
  if (!skip_reason.empty()) skip(skip_reason);
}
