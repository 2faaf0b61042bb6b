// benchmarks/perf/sweep.cpp — the sizes of a sweep (sweep.hpp).
#include <perf/sweep.hpp>

namespace strata::perf {

std::vector<SweepPoint> sweep_points(const Options& options, std::size_t element_bytes, int ranks) {
  std::vector<SweepPoint> points;
  const auto sizes = sweep_sizes(options.min_bytes, options.max_bytes, options.step_factor);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    points.push_back(
        {i, sizes[i], collective_sizes(options.collective, sizes[i], element_bytes, ranks)});
  return points;
}

}  // namespace strata::perf
