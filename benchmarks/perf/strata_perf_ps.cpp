// benchmarks/perf/strata_perf_ps.cpp — strata-perf's --transport ps: this process is a worker
// (a rank of a TcpCommunicator among the workers, with a ps::Client to every server), a
// parameter server (ps::Server), or the supervisor that starts both on 127.0.0.1 (launch.hpp).
//
// Servers are processes, as ps tasks are in a cluster (strata-launch --ps, strata-ps): each has
// its CPU (--bind places it after the workers), its own memory and its own CPU clock, which
// worker 0 reads around the timed calls for the servers' CPU time per byte, whatever the
// server's threads; and the peers worker 0 measures (a plain TCP stream and ping-pong) run
// between worker 0's CPU and server 0's, where push_pull's bytes go.
#include <chrono>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <sched.h>

#include <fmt/format.h>

#include <perf/bind.hpp>
#include <perf/ceiling_report.hpp>
#include <perf/launch.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/ps_report.hpp>
#include <perf/ps_rows.hpp>
#include <perf/report.hpp>

#include <strata/communicator/tcp.hpp>
#include <strata/ps/client.hpp>
#include <strata/resolve.hpp>

#include "strata_perf_modes.hpp"

namespace strata::perf {
namespace {

// The one CPU process `pid` may run on, if it is bound to one.
std::optional<int> bound_cpu(long pid) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(static_cast<pid_t>(pid), sizeof mask, &mask) != 0 ||
      CPU_COUNT(&mask) != 1)
    return std::nullopt;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) return cpu;
  return std::nullopt;
}

// Worker 0's measurements besides push_pull: the servers' CPU clocks, and the peers between
// its CPU and server 0's.
PsProbe probe_of(const Options& options, const PsEnvironment& ps) {
  PsProbe probe;
  const std::vector<long> pids = ps.pids;
  probe.server_cpu = [pids]() -> std::optional<std::chrono::nanoseconds> {
    if (pids.empty()) return std::nullopt;
    std::chrono::nanoseconds total{};
    for (const long pid : pids) {
      const auto cpu = process_cpu_time(pid);
      if (!cpu) return std::nullopt;
      total += *cpu;
    }
    return total;
  };
  const std::optional<int> peer_cpu = pids.empty() ? std::nullopt : bound_cpu(pids.front());
  const int warmup = options.warmup_iters;
  const int iters = options.iters;
  probe.stream = [=](std::size_t bytes) -> std::optional<PsStream> {
    return PsStream{measure_tcp_stream_seconds(bytes, warmup, iters, peer_cpu) * 1e6,
                    measure_tcp_stream_seconds(bytes, warmup, iters, peer_cpu, "reno") * 1e6};
  };
  probe.ping_pong = [=](std::size_t bytes) -> std::optional<PsPingPong> {
    return PsPingPong{bytes, measure_tcp_ping_pong_us(bytes, true, peer_cpu),
                      measure_tcp_ping_pong_us(bytes, false, peer_cpu)};
  };
  return probe;
}

// A worker started by our own supervisor.
int run_ps_worker(const Options& options, const WorkerEnvironment& worker,
                  const PsEnvironment& ps) {
  const int size = static_cast<int>(worker.addresses.size());
  if (options.ranks && *options.ranks != size)
    throw CommandLineError(fmt::format(
        "--ranks {} but strata-perf's supervisor describes {} workers", *options.ranks, size));
  if (ps.servers.empty())
    throw CommandLineError("a worker of --transport ps was started without its servers");
  const std::string where =
      fmt::format("tcp {}, {}", worker.addresses[static_cast<std::size_t>(worker.rank)].to_string(),
                  describe_affinity());
  communicator::TcpCommunicator comm(
      communicator::TcpMembership{worker.rank, worker.addresses, 0, worker.listen_fd},
      communicator::TcpOptions{});
  try {
    ps::Client client(ps_cluster(worker.addresses, ps.servers), worker.rank, 1,
                      {.shared_memory = options.ps_shared_memory});
    std::optional<Reporter> reporter;
    PsRankSetup setup;
    if (worker.rank == 0) {
      reporter.emplace(options);
      for (std::size_t s = 0; s < ps.servers.size(); ++s)
        setup.servers.push_back(describe_server(
            static_cast<int>(s), s < ps.pids.size() ? ps.pids[s] : 0, ps.servers[s]));
      setup.group_cpus = worker.group_cpus;
      setup.probe = probe_of(options, ps);
    }
    const int status =
        run_ps_rank(comm, client, options, where, reporter ? &*reporter : nullptr, setup);
    client.done();  // once every worker has, the servers print their reports and exit
    return status;
  } catch (const std::exception& error) {
    comm.abort(error.what());
    throw;
  }
}

}  // namespace

int run_ps(const Options& options, char** argv) {
  const auto ps = ps_environment();
  if (ps && ps->index) return serve_ps_task(options, *ps);
  if (const auto worker = worker_environment()) {
    if (!ps)
      throw CommandLineError(
          fmt::format("a worker of --transport ps was started without {}", kPsAddressesVariable));
    return run_ps_worker(options, *worker, *ps);
  }
  if (strata::resolve_cluster().source != "none")
    throw CommandLineError(
        "--transport ps starts its own workers and parameter servers on 127.0.0.1; a launcher's "
        "variables are set (TF_CONFIG, torchrun's, OpenMPI's or SLURM's): run it without them");
  const int workers = options.ranks.value_or(kDefaultRanks);
  check_against_group(options, workers);
  for (const auto& path : {options.csv, options.json})
    if (path && *path != "-") OutputFile probe(*path);  // a usage error, reported once
  return supervise_local_group(workers, argv, options.bind, options.servers);
}

}  // namespace strata::perf
