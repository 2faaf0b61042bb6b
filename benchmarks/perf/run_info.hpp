// benchmarks/perf/run_info.hpp — what a run reports besides its rows: its settings and ranks
// (the headers of every output) and the footer's summary. Every row a sink gets is already the
// group's (times are the slowest rank's, wrong counts summed over ranks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <perf/ceiling_report.hpp>
#include <perf/nccl_format.hpp>
#include <perf/options.hpp>

namespace strata::perf {

/// Where one rank runs.
struct RankInfo {
  long pid = 0;
  std::string host;
  std::string where;  ///< "thread 1 (local)", "tcp 127.0.0.1:40001", ...
};

/// What a run measures, for the headers of every output.
struct RunInfo {
  Options options;
  int ranks = 0;
  /// The all-reduce algorithm actually used ("scatter_gather", "automatic", "ring", ...).
  std::string algorithm;
  /// Every rank, in rank order.
  std::vector<RankInfo> rank_info;
  /// With --ceiling: this machine's limits, measured by rank 0 before the sweep.
  std::optional<Ceilings> ceilings{};
  /// --transport ps: every parameter server, in task order (the ranks are its workers).
  std::vector<RankInfo> servers{};
};

/// The share of the full-duplex TCP ceiling that `row`'s busbw reaches, when the run has one
/// to be held to: a 2-rank TCP all-reduce's busbw is what each rank sends each way, comparable
/// to the duplex rate. Other shapes get the ceilings, not a ratio that would mislead.
std::optional<double> share_of_tcp_ceiling(const RunInfo& info, const Row& row);

/// The footer's numbers.
struct Summary {
  /// (rank, row, placement) checks that found a wrong element.
  std::int64_t out_of_bounds = 0;
  /// Mean busbw over every out-of-place and in-place measurement.
  double average_busbw_gbps = 0;
  std::size_t rows = 0;
};

/// Folds rows into a Summary as nccl-tests does.
class SummaryBuilder {
 public:
  void add(const Row& row);
  Summary summary() const;

 private:
  Summary summary_;
  double busbw_sum_ = 0;
  std::size_t measurements_ = 0;
};

}  // namespace strata::perf
