// benchmarks/perf/peers/peer_report.hpp — rank 0's outputs in a peer: strata-perf's table and
// CSV (sinks.hpp, nccl_format.hpp) with the peer's own transport ("gloo-tcp", "mpi") and
// algorithm names, which strata-perf's sinks take from its Transport enum.
//
// The CSV header and lines are CsvSink's (kCsvHeader, csv_line), so that one parser reads
// strata-perf's and the peers' files. A peer that runs several algorithms (strata-perf-gloo
// --algo all) writes one table per algorithm and one CSV: the header once, then each
// algorithm's rows.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include <perf/nccl_format.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/run_info.hpp>

namespace strata::perf::peers {

/// Who produced a block of rows.
struct PeerRun {
  std::string tool;       ///< "strata-perf-gloo"
  std::string transport;  ///< CSV and table "transport": "gloo-tcp", "mpi"
};

/// The table (stdout, or stderr when --csv takes stdout) and the CSV of --csv.
class PeerReporter {
 public:
  /// @throws CommandLineError when the CSV file cannot be written.
  PeerReporter(const Options& options, PeerRun run);

  /// Starts a block: the table's header (strata-perf's, with the peer's names), and the CSV
  /// header before the first block.
  void begin(const RunInfo& info);
  void row(const Row& row);
  /// Ends the block: nccl-tests' footer ("# Out of bounds values : 0 OK").
  Summary end();

  Progress& progress() noexcept { return progress_; }

 private:
  PeerRun run_;
  std::FILE* table_;
  std::optional<OutputFile> csv_;
  bool csv_header_written_ = false;
  Progress progress_;
  SummaryBuilder summary_;
  std::string collective_, algorithm_;
  int ranks_ = 0;
};

}  // namespace strata::perf::peers
