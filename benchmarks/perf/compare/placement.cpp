// benchmarks/perf/compare/placement.cpp — Open MPI's rankfile (placement.hpp).
#include <perf/compare/placement.hpp>

#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace strata::perf {

std::vector<std::string> mpirun_placement(Binding binding, int ranks,
                                          const std::filesystem::path& scratch) {
  const auto cpus = allowed_cpus();
  if (!cpu_of_rank(binding, 0, ranks, cpus)) return {"--bind-to", "none"};
  const auto path = scratch / "mpi.rankfile";
  std::ofstream file(path);
  for (int r = 0; r < ranks; ++r)
    file << fmt::format("rank {}=localhost slot={}\n", r, *cpu_of_rank(binding, r, ranks, cpus));
  if (!file.flush()) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
  std::vector<std::string> placement = {"--rankfile", path.string(), "--mca",
                                        "rmaps_rank_file_physical", "1"};
  if (static_cast<std::size_t>(ranks) > cpus.size())
    placement.insert(placement.end(), {"--mca", "mpi_yield_when_idle", "1"});
  return placement;
}

}  // namespace strata::perf
