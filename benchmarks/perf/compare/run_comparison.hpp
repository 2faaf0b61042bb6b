// benchmarks/perf/compare/run_comparison.hpp — `strata-perf --compare`: strata next to its peers,
// measured in the same run on the same machine.
//
// The contenders (contenders.hpp) run one after another as separate programs, each writing
// strata-perf's CSV to a file this process reads back (series.hpp). Every contender places its
// ranks alike (--bind, bind.hpp; Open MPI's through placement.hpp). With --launches K every
// contender runs K times, interleaved (launch 1 of each, then launch 2 of each, ...), so that a
// noisy neighbour hurts all of them alike; the tables (tables.hpp) show, per size, the median
// over launches of each contender's in-place time, the bus bandwidth of that time, and the
// fastest and slowest launch. Any wrong value in any launch of anyone fails the comparison
// (exit status 1).
#pragma once

#include <string>

#include <perf/options.hpp>

namespace strata::perf {

/// Runs the comparison; prints the tables (and the ceilings with --ceiling) on stdout, or on
/// stderr when the CSV goes to stdout. `mpiexec`: the mpirun the build found (may be empty;
/// find_mpiexec then looks on the PATH).
/// Returns strata-perf's exit status: 0, 1 on wrong values, 3 when a contender failed.
int run_comparison(const Options& options, int ranks, const std::string& mpiexec);

}  // namespace strata::perf
