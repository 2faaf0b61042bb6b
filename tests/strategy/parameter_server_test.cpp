// ParameterServerStrategy across real processes: ps tasks and workers run the same program
// (tests/support/tcp_worker.cpp, scenario ps-train), the ps tasks serve until every worker has
// finished, and asynchronous training of examples/logistic_regression.hpp reaches the known
// solution; one worker with one replica trains exactly as OneDeviceStrategy does, sharded or not;
// synchronous training over the servers equals single-process training; bounded staleness keeps
// every worker within k steps of the slowest (instrumented in the workers' own logs).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/cluster/tf_config.hpp>
#include <strata/strategies.hpp>

#include "logistic_regression.hpp"
#include "process.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using strata::cluster::TaskType;
const std::string kWorker = STRATA_TEST_TCP_WORKER;

// `workers` workers and `servers` ps tasks on free loopback ports, each running `scenario`.
struct PsCluster {
  PsCluster(int workers, int servers, const std::vector<std::string>& scenario,
            const std::string& ps_program = kWorker)
      : spec(strata::testing::loopback_ps_cluster(workers, servers)) {
    auto start = [&](strata::cluster::Task task) {
      std::vector<std::string> argv{task.type == TaskType::ps ? ps_program : kWorker};
      if (argv[0] == kWorker) argv.insert(argv.end(), scenario.begin(), scenario.end());
      return strata::testing::Process(
          argv,
          {{"TF_CONFIG", strata::cluster::make_tf_config(spec, task)}, {"STRATA_TIMEOUT", "30s"}},
          strata::testing::temp_path(
              fmt::format("{}{}", strata::to_string(task.type), task.index)));
    };
    for (int i = 0; i < servers; ++i)
      ps.push_back(start({TaskType::ps, i}));
    for (int i = 0; i < workers; ++i)
      worker.push_back(start({TaskType::worker, i}));
  }
  strata::cluster::ClusterSpec spec;
  std::vector<strata::testing::Process> ps;
  std::vector<strata::testing::Process> worker;
};

}  // namespace

TEST_CASE("asynchronous training over parameter servers reaches the solution") {
  for (auto [workers, local, servers] : {std::tuple{2, 1, 1}, std::tuple{3, 2, 2}}) {
    CAPTURE(workers);
    CAPTURE(local);
    CAPTURE(servers);
    PsCluster run(workers, servers, {"ps-train", std::to_string(local), "30"});
    int chiefs = 0;
    std::set<std::string> workers_seen;
    for (auto& process : run.worker) {
      REQUIRE(process.wait_for(120s));
      const std::string output = process.output();
      CHECK_MESSAGE(process.exit_code() == 0, output);
      CHECK(strata::testing::line_after(output, "replicas") == std::to_string(workers * local));
      CHECK_MESSAGE(std::stod(strata::testing::line_after(output, "error")) < 1e-3, output);
      chiefs += strata::testing::line_after(output, "chief") == "1" ? 1 : 0;
      // The chief is worker 0; every worker knows its index and the count.
      const std::string worker = strata::testing::line_after(output, "worker");
      workers_seen.insert(worker);
      CHECK((strata::testing::line_after(output, "chief") == "1") == worker.starts_with("0 of"));
      CHECK(worker.ends_with(fmt::format(" of {}", workers)));
    }
    CHECK(chiefs == 1);
    CHECK(workers_seen.size() == static_cast<std::size_t>(workers));
    // The servers return once every worker has finished.
    for (auto& process : run.ps) {
      REQUIRE(process.wait_for(30s));
      CHECK_MESSAGE(process.exit_code() == 0, process.output());
      CHECK(process.output().find("served") != std::string::npos);
    }
  }
}

TEST_CASE("one worker with one replica trains as OneDeviceStrategy, sharded or not") {
  for (const bool sharded : {false, true}) {
    CAPTURE(sharded);
    std::vector<std::string> scenario{"ps-train", "1", "5"};
    if (sharded) scenario.push_back("3");
    PsCluster run(1, 2, scenario);
    REQUIRE(run.worker[0].wait_for(120s));
    const std::string output = run.worker[0].output();
    REQUIRE_MESSAGE(run.worker[0].exit_code() == 0, output);
    // The servers apply the same SGD to the same gradients, in the same order: the same bits.
    CHECK(strata::testing::line_after(output, "params") ==
          strata::testing::line_after(output, "single"));
    for (auto& process : run.ps)
      REQUIRE(process.wait_for(30s));
  }
}

TEST_CASE("a checkpoint moves from Mirrored to sharded parameter servers and back, bit for bit") {
  // Mirrored trains epochs 0-1 and saves; one worker over 2 ps tasks, its variables in 3
  // shards, restores (pushing every shard), trains epochs 2-3 and saves (pulling them);
  // Mirrored restores that and trains epochs 4-5. One replica each, so every stage sums its
  // gradients as OneDeviceStrategy does: the result must be its 6 epochs, bit for bit.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata_ps_checkpoint_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto problem = example::make_problem(1024, 8);
  example::TrainConfig config;
  config.checkpoint_dir = dir;
  config.epochs = 2;
  strata::MirroredStrategy first({.num_replicas = 1});
  example::train(first, problem, config, [](std::size_t, double) {});

  PsCluster run(1, 2, {"ps-train", "1", "4", "3", dir.string()});
  REQUIRE(run.worker[0].wait_for(120s));
  const std::string output = run.worker[0].output();
  REQUIRE_MESSAGE(run.worker[0].exit_code() == 0, output);
  CHECK(strata::testing::line_after(output, "resumed") == "32");
  for (auto& process : run.ps)
    REQUIRE(process.wait_for(30s));

  config.epochs = 6;
  strata::MirroredStrategy last({.num_replicas = 1});
  const auto resumed = example::train(last, problem, config, [](std::size_t, double) {});
  CHECK(resumed.resumed_from == 64);
  config.checkpoint_dir.clear();
  strata::OneDeviceStrategy single;
  const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
  CHECK(resumed.weights == reference.weights);
  CHECK(resumed.bias == reference.bias);
  std::filesystem::remove_all(dir);
}

TEST_CASE("synchronous training over parameter servers, stopped and resumed, ends bit for bit") {
  // Two workers of two replicas over 2 ps tasks: 6 epochs at once, against 3 epochs, a new
  // cluster (fresh servers) that restores the chief's checkpoint, and 3 more.
  const auto dir =
      std::filesystem::temp_directory_path() / ("strata_ps_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto params_of = [](PsCluster& run) {
    std::vector<std::string> params;
    for (auto& process : run.worker) {
      REQUIRE(process.wait_for(120s));
      const std::string output = process.output();
      REQUIRE_MESSAGE(process.exit_code() == 0, output);
      params.push_back(strata::testing::line_after(output, "params"));
    }
    for (auto& process : run.ps)
      REQUIRE(process.wait_for(30s));
    return params;
  };
  PsCluster whole(2, 2, {"ps-train", "2", "6", "sync"});
  const auto reference = params_of(whole);
  PsCluster first(2, 2, {"ps-train", "2", "3", "sync", (dir / "run").string()});
  params_of(first);
  PsCluster second(2, 2, {"ps-train", "2", "6", "sync", (dir / "run").string()});
  const auto resumed = params_of(second);
  CHECK(strata::testing::line_after(second.worker[0].output(), "resumed") == "48");
  CHECK(strata::testing::line_after(second.worker[1].output(), "resumed") == "48");
  CHECK(resumed == reference);
  std::filesystem::remove_all(dir);
}

TEST_CASE("strata-ps serves the workers of a cluster whose ps tasks run no trainer") {
  PsCluster run(2, 2, {"ps-train", "1", "10"}, STRATA_PS_PROGRAM);
  for (auto& process : run.worker) {
    REQUIRE(process.wait_for(120s));
    CHECK_MESSAGE(process.exit_code() == 0, process.output());
    CHECK_MESSAGE(std::stod(strata::testing::line_after(process.output(), "error")) < 1e-2,
                  process.output());
  }
  for (auto& process : run.ps) {
    REQUIRE(process.wait_for(30s));
    CHECK_MESSAGE(process.exit_code() == 0, process.output());
    // Round robin: w on one server, b on the other.
    CHECK_MESSAGE(process.output().find("served 1 shard(s)") != std::string::npos,
                  process.output());
  }
}

TEST_CASE("synchronous training over parameter servers equals single-process training") {
  PsCluster run(2, 2, {"ps-train", "2", "10", "sync"});
  std::string params;
  for (auto& process : run.worker) {
    REQUIRE(process.wait_for(120s));
    const std::string output = process.output();
    CHECK_MESSAGE(process.exit_code() == 0, output);
    CHECK(strata::testing::line_after(output, "replicas") == "4");
    // The servers add the replicas' gradients in replica order: the global batch's gradient up
    // to the order of the additions.
    CHECK_MESSAGE(std::stod(strata::testing::line_after(output, "drift")) < 1e-4, output);
    // Every replica gets the same values after each step: the same bits on every worker.
    if (params.empty()) params = strata::testing::line_after(output, "params");
    CHECK(strata::testing::line_after(output, "params") == params);
  }
  for (auto& process : run.ps)
    REQUIRE(process.wait_for(30s));
}

namespace {

// When each worker started each step and pushed each step's gradient (steady_clock ns), from
// the "start N T" and "push N T" lines of its output.
struct StepTimes {
  std::vector<long long> start, push, applied;
};

StepTimes step_times(const std::string& output) {
  StepTimes times;
  std::istringstream lines(output);
  std::string word;
  std::size_t step = 0;
  long long at = 0;
  while (lines >> word) {
    if (word != "start" && word != "push" && word != "applied") continue;
    lines >> step >> at;
    auto& series = word == "start" ? times.start : word == "push" ? times.push : times.applied;
    series.resize(std::max(series.size(), step + 1));
    series[step] = at;
  }
  return times;
}

// Steps at which a worker started step m before some worker had pushed step m − 1 − k: it ran
// more than k steps ahead of that worker.
int violations(const std::vector<StepTimes>& workers, int k) {
  int count = 0;
  for (const auto& w : workers)
    for (std::size_t m = static_cast<std::size_t>(k) + 1; m < w.start.size(); ++m)
      for (const auto& j : workers)
        if (j.push.at(m - 1 - static_cast<std::size_t>(k)) >= w.start[m]) ++count;
  return count;
}

}  // namespace

TEST_CASE("bounded staleness keeps every worker within k steps of the slowest") {
  // Worker 0 sleeps 15 ms before each push; the others would run ahead without the bound.
  for (const std::string mode : {"0", "2", "async"}) {
    CAPTURE(mode);
    PsCluster run(3, 1, {"ps-ssp", mode, "12", "0", "15"});
    std::vector<StepTimes> workers;
    for (auto& process : run.worker) {
      REQUIRE(process.wait_for(60s));
      CHECK_MESSAGE(process.exit_code() == 0, process.output());
      workers.push_back(step_times(process.output()));
      REQUIRE(workers.back().start.size() == 12);
      REQUIRE(workers.back().push.size() == 12);
    }
    if (mode == "async") {
      // The instrument sees the fast workers run ahead when nothing holds them back.
      CHECK(violations(workers, 2) > 0);
    } else {
      CHECK(violations(workers, std::stoi(mode)) == 0);
    }
    for (auto& process : run.ps)
      REQUIRE(process.wait_for(30s));
  }
}

TEST_CASE("with a backup worker the others never wait for a slow one, and training converges") {
  // 3 workers, 2 aggregated per step; worker 0 sleeps 150 ms before each push. With a backup,
  // most of the other workers' steps apply as soon as both have pushed; when every gradient is
  // awaited (backup0), none applies before worker 0 has pushed that step.
  for (const std::string mode : {"backup1", "backup0"}) {
    CAPTURE(mode);
    PsCluster run(3, 2, {"ps-ssp", mode, "6", "0", "150"});
    std::vector<StepTimes> workers;
    for (auto& process : run.worker) {
      REQUIRE(process.wait_for(60s));
      CHECK_MESSAGE(process.exit_code() == 0, process.output());
      workers.push_back(step_times(process.output()));
      REQUIRE(workers.back().push.size() == 6);
      REQUIRE(workers.back().applied.size() == 6);
    }
    int before_slow = 0;  // (fast worker, step) applied before worker 0 pushed that step
    int unheld = 0;       // (fast worker, step) applied within half the pause of its push
    for (std::size_t w = 1; w < workers.size(); ++w)
      for (std::size_t m = 0; m < 6; ++m) {
        before_slow += workers[w].applied[m] < workers[0].push[m] ? 1 : 0;
        unheld += workers[w].applied[m] - workers[w].push[m] < 75'000'000 ? 1 : 0;
      }
    CAPTURE(before_slow);
    if (mode == "backup1")
      CHECK(unheld >= 6);  // a worker that starts late pairs with the slow one for a while
    else
      CHECK(before_slow == 0);
    for (auto& process : run.ps)
      REQUIRE(process.wait_for(30s));
  }
  PsCluster run(3, 2, {"ps-train", "1", "30", "backup"});
  for (auto& process : run.worker) {
    REQUIRE(process.wait_for(120s));
    const std::string output = process.output();
    CHECK_MESSAGE(process.exit_code() == 0, output);
    CHECK_MESSAGE(std::stod(strata::testing::line_after(output, "error")) < 1e-3, output);
  }
  for (auto& process : run.ps)
    REQUIRE(process.wait_for(30s));
}
