// benchmarks/perf/compare/placement.hpp — where `strata-perf --compare` puts Open MPI's ranks:
// on the CPUs --bind gives strata's and Gloo's (bind.hpp), through a rankfile.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <perf/bind.hpp>

namespace strata::perf {

/// mpirun's options that place rank r where cpu_of_rank puts strata's: a rankfile (written
/// into `scratch`) of the CPUs' OS numbers. Open MPI yields while it waits only when it knows
/// a core is overloaded, which a rankfile hides: it is told, as it tells itself under
/// --oversubscribe, or ranks spinning on one core starve each other (milliseconds per call).
/// @throws std::runtime_error when the rankfile cannot be written.
std::vector<std::string> mpirun_placement(Binding binding, int ranks,
                                          const std::filesystem::path& scratch);

}  // namespace strata::perf
