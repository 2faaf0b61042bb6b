// benchmarks/perf/peers/peer_report.cpp — a peer's table and CSV (peer_report.hpp).
#include <perf/peers/peer_report.hpp>

#include <utility>

#include <fmt/format.h>

#include <perf/sinks.hpp>

namespace strata::perf::peers {

PeerReporter::PeerReporter(const Options& options, PeerRun run)
    : run_(std::move(run)),
      table_(options.csv == "-" ? stderr : stdout),
      progress_(options.progress) {
  if (options.csv) csv_.emplace(*options.csv);
}

void PeerReporter::begin(const RunInfo& info) {
  progress_.clear();
  summary_ = SummaryBuilder{};
  collective_ = std::string(to_string(info.options.collective));
  algorithm_ = info.algorithm;
  ranks_ = info.ranks;
  write_flushed(table_, table_preamble(run_.tool, run_.transport, info) + table_header());
  if (csv_ && !csv_header_written_) {
    write_flushed(csv_->get(), std::string(kCsvHeader));
    csv_header_written_ = true;
  }
}

void PeerReporter::row(const Row& row) {
  summary_.add(row);
  progress_.clear();
  write_flushed(table_, table_row(row));
  if (csv_)
    write_flushed(csv_->get(), csv_line(collective_, run_.transport, algorithm_, ranks_, row));
}

Summary PeerReporter::end() {
  progress_.clear();
  const Summary summary = summary_.summary();
  write_flushed(table_,
                table_footer(summary.out_of_bounds, summary.average_busbw_gbps) +
                    fmt::format("# Collective test concluded: {} {}\n", run_.tool, collective_));
  return summary;
}

}  // namespace strata::perf::peers
