// benchmarks/perf/strata_perf_tcp.cpp — strata-perf's --transport tcp: this process is one rank
// on a TcpCommunicator, or the supervisor that starts the ranks on 127.0.0.1 (launch.hpp).
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <perf/bind.hpp>
#include <perf/launch.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/report.hpp>
#include <perf/runner.hpp>

#include <strata/communicator/tcp.hpp>
#include <strata/resolve.hpp>

#include "strata_perf_modes.hpp"

namespace strata::perf {
namespace {

// `size` ranks in all.
communicator::TcpOptions tcp_options(const Options& options, int size) {
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
  // --transport tcp measures TCP even between the processes of one host.
  tcp.shared_memory = options.transport == Transport::shm;
  tcp.congestion_control = options.congestion;
  if (options.lend_from) tcp.lend_from_bytes = *options.lend_from;
  // Room for the largest call's buffers: an all-gather's output holds every rank's input, a
  // reduce-scatter's input every rank's output. Pages are only taken as they are written.
  if (options.shared_buffers)
    tcp.shared_buffer_bytes =
        (static_cast<std::size_t>(size) + 2) * options.max_bytes + (std::size_t{1} << 20);
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
    const auto algorithm =
        comm.uses_shared_memory() ? "shared_memory" : to_string(comm.tcp_options().all_reduce);
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
      tcp_options(options, size));
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
  communicator::TcpCommunicator comm(std::move(membership), tcp_options(options, resolved.size));
  return run_tcp_rank(comm, options, where);
}

// Before starting processes: a file that cannot be written is a usage error, reported once.
void check_outputs_writable(const Options& options) {
  for (const auto& path : {options.csv, options.json})
    if (path && *path != "-") OutputFile probe(*path);
}

}  // namespace

int run_tcp(const Options& options, char** argv) {
  if (const auto worker = worker_environment()) return run_worker(options, *worker);
  auto resolved = strata::resolve_cluster();
  if (resolved.source != "none") return run_member(options, resolved);
  const int ranks = options.ranks.value_or(kDefaultRanks);
  check_against_group(options, ranks);
  check_outputs_writable(options);
  return supervise_local_group(ranks, argv, options.bind);
}

}  // namespace strata::perf
