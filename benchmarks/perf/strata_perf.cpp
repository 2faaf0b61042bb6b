// benchmarks/perf/strata_perf.cpp — strata-perf, an nccl-tests-style benchmark of strata's
// collectives:
//
//   strata-perf all_reduce -b 8 -e 256M -f 2 --transport tcp --ranks 4
//
// It starts the ranks itself: threads with LocalCommunicator (--transport local,
// strata_perf_local.cpp), or processes on 127.0.0.1 with TcpCommunicator (--transport tcp;
// strata_perf_tcp.cpp, launch.hpp), or threads on the GPUs with NcclCommunicator, measured against
// raw NCCL (--transport nccl; strata_perf_nccl.cpp), or worker and parameter-server processes
// measuring push_pull next to a plain TCP stream and ping-pong (--transport ps;
// strata_perf_ps.cpp). Under a launcher (TF_CONFIG, torchrun, OpenMPI, SLURM; e.g. strata-launch
// -n 4 -- strata-perf all_reduce --transport tcp) the process is one rank of that cluster
// instead. Rank 0 prints nccl-tests' table (report.hpp) of what every rank
// measured (runner.hpp); `strata-perf --help` lists the flags (options.hpp). --ceiling adds this
// machine's limits (ceiling_report.hpp); --compare runs strata and the installed peers, Gloo and
// OpenMPI, side by side (compare/, peers/).
//
// Exit status: 0 every value right; 1 wrong values; 2 bad command line; 3 a collective, the
// group, or the start of the ranks failed.
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <perf/compare/run_comparison.hpp>
#include <perf/options.hpp>

#include <strata/core/error.hpp>

#include "strata_perf_modes.hpp"

namespace strata::perf {
namespace {

// The mpirun this build found (STRATA_PERF_MPIEXEC, with strata-perf-mpi), for --compare.
#ifdef STRATA_PERF_MPIEXEC
const std::string kBuildMpiexec = STRATA_PERF_MPIEXEC;
#else
const std::string kBuildMpiexec;
#endif

int run(const Options& options, char** argv) {
  if (options.compare)
    return run_comparison(options, options.ranks.value_or(kDefaultRanks), kBuildMpiexec);
  if (options.transport == Transport::local) return run_local(options);
  if (options.transport == Transport::nccl) return run_nccl(options);
  if (options.transport == Transport::ps) return run_ps(options, argv);
  return run_tcp(options, argv);
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
    return static_cast<int>(strata::exit_status_of(error));
  } catch (const std::exception& error) {
    fmt::print(stderr, "strata-perf: {}\n", error.what());
    return kExitFailure;
  }
}
