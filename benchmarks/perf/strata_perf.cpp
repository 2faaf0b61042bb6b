// benchmarks/perf/strata_perf.cpp — strata-perf, an nccl-tests-style benchmark of strata's
// collectives:
//
//   strata-perf all_reduce -b 8 -e 256M -f 2 --transport tcp --ranks 4
//
// It starts the ranks itself: threads with LocalCommunicator (--transport local), or processes
// on 127.0.0.1 with TcpCommunicator (--transport tcp; launch.hpp). Under a launcher (TF_CONFIG,
// torchrun, OpenMPI, SLURM; e.g. strata-launch -n 4 -- strata-perf all_reduce --transport tcp)
// the process is one rank of that cluster instead. Rank 0 prints nccl-tests' table (report.hpp)
// of what every rank measured (runner.hpp); `strata-perf --help` lists the flags (options.hpp).
// --ceiling adds this machine's limits (ceiling_report.hpp); --compare runs strata and the
// installed peers, Gloo and OpenMPI, side by side (compare.hpp, peers/).
//
// Exit status: 0 every value right; 1 wrong values; 2 bad command line; 3 a collective, the
// group, or the start of the ranks failed.
#include <cerrno>
#include <cstdio>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bind.hpp"
#include "compare.hpp"
#include "launch.hpp"
#include "options.hpp"
#include "report.hpp"
#include "runner.hpp"

#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/algorithms/all_reduce_scatter_gather.hpp>
#include <strata/resolve.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/core/error.hpp>

namespace strata::perf {
namespace {

// run_rank returns 0, or 1 when values were wrong.
constexpr int kExitUsage = 2;
constexpr int kExitFailure = 3;
constexpr int kDefaultRanks = 2;

// ---- local: one thread per rank
// ------------------------------------------------------------------

template <class AllReduceAlgorithm>
int run_local_group(const Options& options, std::string_view algorithm) {
  const int ranks = options.ranks.value_or(kDefaultRanks);
  check_against_group(options, ranks);
  Reporter reporter(options);
  auto group = communicator::LocalCommunicator<AllReduceAlgorithm>::create(ranks);
  std::vector<int> status(static_cast<std::size_t>(ranks), 0);
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  const std::vector<int> cpus = allowed_cpus();
  auto rank_main = [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    auto& comm = group[i];
    try {
      if (const auto cpu = cpu_of_rank(options.bind, r, ranks, cpus);
          cpu && !bind_calling_thread(*cpu))
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("binding rank {} to CPU {}", r, *cpu));
      status[i] = run_rank(comm, options, algorithm,
                           fmt::format("thread {:>3} (local), {}", r, describe_affinity()),
                           r == 0 ? &reporter : nullptr, cpus);
    } catch (const std::exception& error) {
      comm.abort(error.what());  // the other ranks stop waiting for this one at once
      errors[i] = error.what();
      status[i] = kExitFailure;
    } catch (...) {
      comm.abort("unknown exception");
      errors[i] = "unknown exception";
      status[i] = kExitFailure;
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int r = 1; r < ranks; ++r)
      threads.emplace_back(rank_main, r);
    rank_main(0);
  }
  // Every rank of a failed group raises; print each distinct reason once.
  std::set<std::string> printed;
  for (const auto& error : errors)
    if (!error.empty() && printed.insert(error).second)
      fmt::print(stderr, "strata-perf: {}\n", error);
  if (!printed.empty()) return kExitFailure;
  return status[0];
}

int run_local(const Options& options) {
  switch (options.algorithm) {
    case Algorithm::reduce_to_one:
      return run_local_group<algorithms::AllReduceReduceToOne>(options, "reduce_to_one");
    default:
      return run_local_group<algorithms::AllReduceScatterGather>(options, "scatter_gather");
  }
}

// ---- tcp: this process is one rank
// ---------------------------------------------------------------

communicator::TcpOptions tcp_options(const Options& options) {
  communicator::TcpOptions tcp;
  switch (options.algorithm) {
    case Algorithm::ring:
      tcp.all_reduce = communicator::TcpAllReduce::ring;
      break;
    case Algorithm::recursive_doubling:
      tcp.all_reduce = communicator::TcpAllReduce::recursive_doubling;
      break;
    case Algorithm::halving_doubling:
      tcp.all_reduce = communicator::TcpAllReduce::halving_doubling;
      break;
    default:
      tcp.all_reduce = communicator::TcpAllReduce::automatic;
      break;
  }
  tcp.congestion_control = options.congestion;
  if (options.lend_from) tcp.lend_from_bytes = *options.lend_from;
  return tcp;
}

void check_group_size(const Options& options, int size, std::string_view source) {
  if (options.ranks && *options.ranks != size)
    throw CommandLineError(
        fmt::format("--ranks {} but {} describes a group of {}", *options.ranks, source, size));
  check_against_group(options, size);
}

int run_tcp_rank(communicator::TcpCommunicator& comm, const Options& options,
                 std::string_view where, const std::vector<int>& group_cpus = {}) {
  try {
    std::optional<Reporter> reporter;
    if (comm.rank() == 0) reporter.emplace(options);
    const auto algorithm = to_string(comm.tcp_options().all_reduce);
    return run_rank(comm, options, algorithm, where, reporter ? &*reporter : nullptr, group_cpus);
  } catch (const std::exception& error) {
    comm.abort(error.what());
    throw;
  }
}

// A rank started by our own supervisor (launch.hpp).
int run_worker(const Options& options, const WorkerEnvironment& worker) {
  const int size = static_cast<int>(worker.addresses.size());
  check_group_size(options, size, "strata-perf's supervisor");
  const std::string where =
      fmt::format("tcp {}, {}", worker.addresses[static_cast<std::size_t>(worker.rank)].to_string(),
                  describe_affinity());
  communicator::TcpCommunicator comm(
      communicator::TcpMembership{worker.rank, worker.addresses, 0, worker.listen_fd},
      tcp_options(options));
  return run_tcp_rank(comm, options, where, worker.group_cpus);
}

// A rank of the cluster a launcher describes (TF_CONFIG, torchrun, OpenMPI, SLURM).
int run_member(const Options& options, cluster::ResolvedCluster& resolved) {
  check_group_size(options, resolved.size, resolved.source);
  auto membership = communicator::membership_of(resolved);
  const std::string where =
      fmt::format("tcp {} ({}), {}",
                  membership.addresses[static_cast<std::size_t>(membership.rank)].to_string(),
                  resolved.source, describe_affinity());
  communicator::TcpCommunicator comm(std::move(membership), tcp_options(options));
  return run_tcp_rank(comm, options, where);
}

// Before starting processes: a file that cannot be written is a usage error, reported once.
void check_outputs_writable(const Options& options) {
  for (const auto& path : {options.csv, options.json})
    if (path && *path != "-") OutputFile probe(*path);
}

int run(const Options& options, char** argv) {
  if (options.compare) return run_comparison(options, options.ranks.value_or(kDefaultRanks));
  if (options.transport == Transport::local) return run_local(options);
  if (const auto worker = worker_environment()) return run_worker(options, *worker);
  auto resolved = strata::resolve_cluster();
  if (resolved.source != "none") return run_member(options, resolved);
  const int ranks = options.ranks.value_or(kDefaultRanks);
  check_against_group(options, ranks);
  check_outputs_writable(options);
  return supervise_local_group(ranks, argv, options.bind);
}

}  // namespace
}  // namespace strata::perf

int main(int argc, char** argv) {
  using namespace strata::perf;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  try {
    const Options options = parse_options(args);
    if (options.help) {
      fmt::print("{}", usage());
      return 0;
    }
    return run(options, argv);
  } catch (const CommandLineError& error) {
    fmt::print(stderr, "strata-perf: {}\nrun 'strata-perf --help' for the flags\n", error.what());
    return kExitUsage;
  } catch (const strata::Error& error) {
    fmt::print(stderr, "strata-perf: {}\n", error.what());
    return kExitFailure;
  } catch (const std::exception& error) {
    fmt::print(stderr, "strata-perf: {}\n", error.what());
    return kExitFailure;
  }
}
