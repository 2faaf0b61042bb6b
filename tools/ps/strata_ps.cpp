// tools/ps/strata_ps.cpp — a parameter-server task without a trainer.
//
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 0}}' strata-ps
//
// Serves the variables of ps task `index` of the cluster in TF_CONFIG until every chief and
// worker task has finished, then prints what it served and exits 0. For clusters whose workers
// run a trainer that does not call strata::ps::serve_if_ps() itself; STRATA_CLUSTER_TOKEN and
// STRATA_TIMEOUT apply as they do to the workers.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/server.hpp>
#include <strata/ps/shard_placement.hpp>
#include <strata/resolve.hpp>

namespace {

constexpr std::string_view kUsage =
    "usage: strata-ps\n"
    "\n"
    "Serves this task's variables as ps task TF_CONFIG names (\"task\": {\"type\": \"ps\"}) until\n"
    "every chief and worker task of the cluster has finished. Exit status: 0 when they all\n"
    "finished, 2 for a bad command line, 70 when TF_CONFIG names no ps task, and\n"
    "strata::ExitStatus for strata's errors (75 when no worker was connected for STRATA_TIMEOUT\n"
    "while some had not finished, 78 for a configuration error).\n";

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      fmt::print("{}", kUsage);
      return 0;
    }
    fmt::print(stderr, "strata-ps: unknown argument '{}'\n{}", flag, kUsage);
    return 2;
  }
  try {
    const auto resolved = strata::resolve_cluster();
    if (resolved.task.type != strata::cluster::TaskType::ps)
      throw strata::UsageError(-1, "strata-ps",
                               fmt::format("TF_CONFIG names task {}, not a ps task", resolved.task),
                               "run strata-ps on the ps tasks of the cluster only");
    strata::ps::Server server(resolved.cluster, resolved.task.index);
    const auto report = server.serve();
    fmt::print(
        "strata-ps: ps task {} served {} shard(s), {} bytes; {} requests, {} bytes in, {} bytes "
        "out, {:.3f} s of CPU; {} stale gradient(s) dropped\n",
        resolved.task.index, report.shards, report.shard_bytes, report.requests, report.bytes_in,
        report.bytes_out, std::chrono::duration<double>(report.cpu_time).count(),
        report.stale_gradients);
    return 0;
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}\n", error.what());
    return static_cast<int>(strata::exit_status_of(error));
  }
}
