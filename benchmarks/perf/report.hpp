// benchmarks/perf/report.hpp — where strata-perf's rows go: rank 0's Reporter feeds the table,
// the CSV and the JSON (sinks.hpp) and keeps the progress line (output.hpp) out of their way.
#pragma once

#include <memory>
#include <vector>

#include <perf/nccl_format.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/run_info.hpp>
#include <perf/sinks.hpp>

namespace strata::perf {

/// Rank 0's outputs: the table (stdout, or stderr when CSV or JSON takes stdout), CSV and JSON
/// when asked for, and the progress line.
class Reporter {
 public:
  /// Opens the files named by the options.
  /// @throws CommandLineError when a file cannot be written.
  explicit Reporter(const Options& options);

  void begin(const RunInfo& info);
  void row(const Row& row);
  Summary end();
  Progress& progress() noexcept { return progress_; }

 private:
  Progress progress_;
  std::vector<std::unique_ptr<RowSink>> sinks_;
  SummaryBuilder summary_;
};

}  // namespace strata::perf
