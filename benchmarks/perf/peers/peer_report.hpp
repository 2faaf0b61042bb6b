// benchmarks/perf/peers/peer_report.hpp — rank 0's outputs in a peer: strata-perf's table and
// CSV (report.hpp, nccl_format.hpp) with the peer's own transport ("gloo-tcp", "mpi") and
// algorithm names, which strata-perf's sinks take from its Transport enum.
//
// The CSV header and row format are CsvSink's, character for character, so that one parser reads
// strata-perf's and the peers' files. A peer that runs several algorithms (strata-perf-gloo
// --algo all) writes one table per algorithm and one CSV: the header once, then each
// algorithm's rows.
#pragma once

#include <cstdio>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "../nccl_format.hpp"
#include "../options.hpp"
#include "../report.hpp"

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
  PeerReporter(const Options& options, PeerRun run)
      : run_(std::move(run)),
        table_(options.csv == "-" ? stderr : stdout),
        progress_(options.progress) {
    if (options.csv) csv_.emplace(*options.csv);
  }

  /// Starts a block: the table's header (strata-perf's, with the peer's names), and the CSV
  /// header before the first block.
  void begin(const RunInfo& info) {
    progress_.clear();
    summary_ = SummaryBuilder{};
    collective_ = std::string(to_string(info.options.collective));
    algorithm_ = info.algorithm;
    ranks_ = info.ranks;
    write(table_, table_preamble(run_.tool, run_.transport, info) + table_header());
    if (csv_ && !csv_header_written_) {
      write(csv_->get(), std::string(kCsvHeader));
      csv_header_written_ = true;
    }
  }

  void row(const Row& row) {
    summary_.add(row);
    progress_.clear();
    write(table_, table_row(row));
    if (!csv_) return;
    std::string text =
        fmt::format("{},{},{},{},{},{},{},{},{}", collective_, run_.transport, algorithm_, ranks_,
                    row.bytes, row.count, row.type, row.redop, row.root);
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      fmt::format_to(std::back_inserter(text), ",{},{},{},{}", m->time_us, m->algbw_gbps,
                     m->busbw_gbps, m->wrong ? fmt::format("{}", *m->wrong) : std::string());
    }
    text += '\n';
    write(csv_->get(), text);
  }

  /// Ends the block: nccl-tests' footer ("# Out of bounds values : 0 OK").
  Summary end() {
    progress_.clear();
    const Summary summary = summary_.summary();
    write(table_, table_footer(summary.out_of_bounds, summary.average_busbw_gbps) +
                      fmt::format("# Collective test concluded: {} {}\n", run_.tool, collective_));
    return summary;
  }

  Progress& progress() noexcept { return progress_; }

 private:
  static void write(std::FILE* file, const std::string& text) {
    std::fputs(text.c_str(), file);
    std::fflush(file);  // a sweep that fails half-way keeps the rows it measured
  }

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
