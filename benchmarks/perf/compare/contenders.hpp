// benchmarks/perf/compare/contenders.hpp — the programs `strata-perf --compare` launches, one
// after another, each with the same sizes, type, op, ranks, warm-up and iteration counts, the
// same data check and the same placement (--bind), each writing strata-perf's CSV:
//   strata over TCP        strata-perf --transport tcp  (processes on 127.0.0.1)
//   strata in process      strata-perf --transport local (threads)
//   Gloo                   strata-perf-gloo --algo all   (ring, ring_chunked, halving_doubling,
//                          bcube over Gloo's TCP transport), when libgloo-dev was found
//   OpenMPI over TCP       mpirun --mca btl tcp,self --mca pml ob1 strata-perf-mpi
//   OpenMPI, defaults      mpirun strata-perf-mpi (shared memory between processes)
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <perf/options.hpp>

namespace strata::perf {

/// A program to run for the comparison, and how to name its series.
struct Contender {
  std::string name;  ///< for messages: "strata tcp", "Gloo", "OpenMPI (TCP)"
  std::vector<std::string> argv;
  /// The series' label; with `per_algo`, "label algo" for each algo the program reports.
  std::string label;
  bool per_algo = false;
  bool strata = false;
  bool tcp = false;
};

/// The arguments every contender shares: the sweep, type, op, iterations and check.
std::vector<std::string> shared_arguments(const Options& options, int ranks);

/// mpirun: `configured` (the one the build found) when it exists, else the first on the PATH;
/// empty when there is none.
std::string find_mpiexec(const std::string& configured);

/// The contenders available on this machine, found next to this executable (mpirun as
/// find_mpiexec(`mpiexec`) finds it); `skipped` gets one line per peer that is not.
/// `scratch`: a directory that outlives their runs.
std::vector<Contender> contenders(const Options& options, int ranks, const std::string& mpiexec,
                                  std::vector<std::string>& skipped,
                                  const std::filesystem::path& scratch);

/// The order of the contenders in launch `launch` (0-based): the list rotated by one more each
/// launch, so that each runs first in turn, right after the ceilings' seconds of full-speed
/// TCP (with --ceiling), and after each neighbour: what the previous program leaves behind on a
/// shared machine then falls on every contender alike.
std::vector<std::size_t> launch_order(std::size_t contenders, int launch);

/// Runs `argv` with stdout sent to /dev/null and stderr inherited, in a process group of its own
/// (so that a kill reaches mpirun's ranks too); kills it at `deadline`. Returns its exit status
/// (128 + signal when a signal ended it).
/// @throws std::runtime_error when fork or waitpid fail.
int run_program(const std::vector<std::string>& argv,
                std::chrono::steady_clock::time_point deadline);

}  // namespace strata::perf
