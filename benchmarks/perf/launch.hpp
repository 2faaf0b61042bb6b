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
//
// With parameter servers (--transport ps), the supervisor first picks a free port on 127.0.0.1
// for each server (binding port 0, then closing it: ps::Server binds its address itself) and
// starts the servers, each with its index, every server's address and every worker's; then the
// ranks (the workers), which also learn every server's address and process id. With --bind
// core, the servers run on the last of the CPUs and the workers on the others, so that a worker
// and a server never share a CPU when there are two or more (each group gets a share of the
// CPUs as it is of the processes, at least one; within a group, consecutive processes share as
// ranks do). Once every worker has exited, the servers, which return when every worker has said
// it finished, get 5 s to exit before SIGKILL.
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
/// And, with parameter servers: a server's index (servers only), every server's address, and
/// every server's process id (workers only).
inline constexpr std::string_view kPsIndexVariable = "STRATA_PERF_PS_INDEX";
inline constexpr std::string_view kPsAddressesVariable = "STRATA_PERF_PS_ADDRESSES";
inline constexpr std::string_view kPsPidsVariable = "STRATA_PERF_PS_PIDS";

/// What a rank started by the supervisor learns from its environment.
struct WorkerEnvironment {
  int rank = 0;
  int listen_fd = -1;
  std::vector<cluster::Address> addresses;
  std::vector<int> group_cpus;  ///< the supervisor's CPUs: the group's, before any --bind
};

/// What a worker or a parameter server of --transport ps learns from its environment.
struct PsEnvironment {
  std::optional<int> index;               ///< this process's server index (servers only)
  std::vector<cluster::Address> servers;  ///< every server's address, in index order
  std::vector<cluster::Address> workers;  ///< every worker's address (servers only)
  std::vector<long> pids;                 ///< every server's process id (workers only)
};

/// The rank this process was started as by a supervisor, or nothing when it was not.
/// @throws CommandLineError when the variables are present but malformed.
std::optional<WorkerEnvironment> worker_environment();

/// The parameter servers this process was told about by a supervisor (a worker of
/// --transport ps), or the server it was started as; nothing when neither.
/// @throws CommandLineError when the variables are present but malformed.
std::optional<PsEnvironment> ps_environment();

/// Starts `ranks` copies of this program (`argv` as given to main) as the ranks of a TCP group
/// on 127.0.0.1, placed as `binding` says, and before them `servers` copies as its parameter
/// servers; waits for them, and returns the exit status (see the file comment).
/// @throws std::system_error when the sockets or processes cannot be created (nothing is left
/// running).
int supervise_local_group(int ranks, char** argv, Binding binding, int servers = 0);

}  // namespace strata::perf
