// benchmarks/perf/sweep.hpp — the sweep every rank runs: one row per size, from a row producer
// called on every rank, for every size, in the same order. The producer returns the group's
// row (every rank gets the same one) and rank 0 hands it to its reporter. `MeasuredRows`
// (measured_rows.hpp) is the producer that times strata; another (a bandwidth ceiling, or a
// second library for comparison) only has to make the same collective calls on every rank, or
// none.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <perf/nccl_format.hpp>
#include <perf/options.hpp>
#include <perf/run_info.hpp>

namespace strata::perf {

/// One size of the sweep.
struct SweepPoint {
  std::size_t index = 0;            ///< 0, 1, ... in sweep order
  std::size_t requested_bytes = 0;  ///< the size the sweep asked for (-b, ·f, ... -e)
  CollectiveSizes sizes;            ///< what is run for it (nccl-tests' rounding)
};

/// Produces the row of one sweep point; called on every rank, for every point, in order.
using RowProducer = std::function<Row(const SweepPoint&)>;

/// The sweep of `options` for elements of `element_bytes` and a group of `ranks`.
std::vector<SweepPoint> sweep_points(const Options& options, std::size_t element_bytes, int ranks);

/// Runs the sweep with `producer` on this rank; rank 0 passes its reporter (strata-perf's
/// Reporter, or a peer's), the others null. Returns the summary (every rank's the same: the rows
/// are the group's).
template <class AnyReporter>
Summary run_sweep(const std::vector<SweepPoint>& points, const RowProducer& producer,
                  AnyReporter* reporter) {
  SummaryBuilder summary;
  for (const auto& point : points) {
    const Row row = producer(point);
    summary.add(row);
    if (reporter != nullptr) reporter->row(row);
  }
  return reporter != nullptr ? reporter->end() : summary.summary();
}

}  // namespace strata::perf
