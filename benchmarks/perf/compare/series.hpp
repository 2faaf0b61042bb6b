// benchmarks/perf/compare/series.hpp — what `strata-perf --compare` reads back from each
// contender: strata-perf's CSV (sinks.hpp's kCsvHeader, which the peers write too), as one
// series of in-place times per algorithm.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace strata::perf {

/// One row of a contender's CSV: the in-place measurement at one size.
struct PeerRow {
  std::size_t bytes = 0;
  double time_us = 0;
  long long wrong = 0;
};

/// What one launch of one program produced: one series per algo column value in its CSV.
struct Series {
  std::string label;  ///< "strata tcp", "gloo ring", "mpi tcp", ...
  bool strata = false;
  bool tcp = false;  ///< moves its bytes over TCP (the peers strata's TCP ring must beat)
  std::vector<PeerRow> rows;
  /// The program, when it reports several algorithms ("gloo"): the tables add its best.
  std::string family{};
};

/// Reads strata-perf's CSV, as the peers write it too: one series per value of the algo column,
/// in the order they first appear, labelled with that value.
/// @throws std::runtime_error naming the file and what is wrong with it.
std::vector<Series> read_series_csv(const std::string& path);

}  // namespace strata::perf
