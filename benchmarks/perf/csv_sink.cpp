// benchmarks/perf/csv_sink.cpp — strata-perf's CSV, which the peers write too (sinks.hpp).
#include <iterator>

#include <fmt/format.h>

#include <perf/sinks.hpp>

namespace strata::perf {

std::string csv_line(std::string_view collective, std::string_view transport,
                     std::string_view algorithm, int ranks, const Row& row) {
  std::string text = fmt::format("{},{},{},{},{},{},{},{},{}", collective, transport, algorithm,
                                 ranks, row.bytes, row.count, row.type, row.redop, row.root);
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    fmt::format_to(std::back_inserter(text), ",{},{},{},{}", m->time_us, m->algbw_gbps,
                   m->busbw_gbps, m->wrong ? fmt::format("{}", *m->wrong) : std::string());
  }
  text += '\n';
  return text;
}

void CsvSink::begin(const RunInfo& info) {
  collective_ = std::string(operation_name(info.options));
  transport_ = std::string(to_string(info.options.transport));
  algorithm_ = info.algorithm;
  ranks_ = info.ranks;
  write_flushed(file_.get(), std::string(kCsvHeader));
}

void CsvSink::row(const Row& row) {
  write_flushed(file_.get(), csv_line(collective_, transport_, algorithm_, ranks_, row));
}

}  // namespace strata::perf
