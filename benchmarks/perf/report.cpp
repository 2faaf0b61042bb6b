// benchmarks/perf/report.cpp — rank 0's Reporter (report.hpp).
#include <perf/report.hpp>

#include <cstdio>

namespace strata::perf {

Reporter::Reporter(const Options& options) : progress_(options.progress) {
  const bool stdout_taken = options.csv == "-" || options.json == "-";
  sinks_.push_back(std::make_unique<TableSink>(stdout_taken ? stderr : stdout));
  if (options.csv) sinks_.push_back(std::make_unique<CsvSink>(*options.csv));
  if (options.json) sinks_.push_back(std::make_unique<JsonSink>(*options.json));
}

void Reporter::begin(const RunInfo& info) {
  progress_.clear();
  for (auto& sink : sinks_)
    sink->begin(info);
}

void Reporter::row(const Row& row) {
  summary_.add(row);
  progress_.clear();
  for (auto& sink : sinks_)
    sink->row(row);
}

Summary Reporter::end() {
  progress_.clear();
  const Summary summary = summary_.summary();
  for (auto& sink : sinks_)
    sink->end(summary);
  return summary;
}

}  // namespace strata::perf
