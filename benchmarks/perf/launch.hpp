// benchmarks/perf/launch.hpp — starting the ranks of `--transport tcp` as processes on
// 127.0.0.1, and finding out, in a rank, which one it is.
//
// The parent (the process the user started) is a supervisor, not a rank:
//   1. it binds and listens on one socket per rank on 127.0.0.1, port 0 (the kernel picks free
//      ports, and holding the sockets means no other program can take them before the ranks
//      start); every socket is close-on-exec;
//   2. it forks one child per rank; child r clears close-on-exec on socket r only, binds itself
//      to its CPU (--bind, bind.hpp) and re-executes /proc/self/exe with the same arguments and
//      four variables: its rank, the descriptor of its socket, every rank's address, and the
//      CPUs the supervisor may use (where rank 0 measures --ceiling's two processes). The
//      TcpCommunicator adopts the socket (TcpMembership::listen_fd). Children die with the
//      parent (PR_SET_PDEATHSIG);
//   3. it closes its copies of the sockets and waits. Exit status: 0 when every rank exits 0,
//      else the first failure's (a rank killed by signal S counts as 128+S). After a first
//      failure the others get the communicators' deadline plus 5 s to fail too (they usually
//      do within milliseconds: a dead peer is a PeerFailureError), then SIGKILL.
// POSIX (Linux) only: fork, execve, waitpid, prctl.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include <perf/bind.hpp>

#include <strata/cluster/cluster_spec.hpp>

namespace strata::perf {

/// The variables a supervisor gives each rank it starts.
inline constexpr std::string_view kWorkerRankVariable = "STRATA_PERF_WORKER_RANK";
inline constexpr std::string_view kWorkerListenFdVariable = "STRATA_PERF_WORKER_LISTEN_FD";
inline constexpr std::string_view kWorkerAddressesVariable = "STRATA_PERF_WORKER_ADDRESSES";
inline constexpr std::string_view kWorkerCpusVariable = "STRATA_PERF_WORKER_CPUS";

/// What a rank started by the supervisor learns from its environment.
struct WorkerEnvironment {
  int rank = 0;
  int listen_fd = -1;
  std::vector<cluster::Address> addresses;
  std::vector<int> group_cpus;  ///< the supervisor's CPUs: the group's, before any --bind
};

/// The rank this process was started as by a supervisor, or nothing when it was not.
/// @throws CommandLineError when the variables are present but malformed.
std::optional<WorkerEnvironment> worker_environment();

/// Starts `ranks` copies of this program (`argv` as given to main) as the ranks of a TCP group
/// on 127.0.0.1, placed as `binding` says, waits for them, and returns the exit status (see the
/// file comment).
/// @throws std::system_error when the sockets or processes cannot be created (nothing is left
/// running).
int supervise_local_group(int ranks, char** argv, Binding binding);

}  // namespace strata::perf
