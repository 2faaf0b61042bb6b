// benchmarks/perf/sinks.hpp — the consumers of strata-perf's rows: nccl-tests' table, CSV and
// JSON (table_sink.cpp, csv_sink.cpp, json_sink.cpp). Only rank 0 has them.
//
// Sinks see the run in three steps, begin (the run's settings and ranks), row (one per size),
// end (the summary), so that another producer of rows (a model of the hardware's ceiling, or a
// second library to compare with) can feed the same sinks.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <perf/nccl_format.hpp>
#include <perf/output.hpp>
#include <perf/run_info.hpp>

namespace strata::perf {

/// A consumer of rows.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void begin(const RunInfo& info) = 0;
  virtual void row(const Row& row) = 0;
  virtual void end(const Summary& summary) = 0;
};

/// The columns of strata-perf's CSV, which the peers write too (`strata-perf --compare` reads
/// them).
inline constexpr std::string_view kCsvHeader =
    "collective,transport,algo,ranks,size_bytes,count,type,redop,root,"
    "oop_time_us,oop_algbw_gbps,oop_busbw_gbps,oop_wrong,"
    "ip_time_us,ip_algbw_gbps,ip_busbw_gbps,ip_wrong\n";

/// One CSV line, with its newline: the run's collective, transport, algorithm and ranks, then the
/// table's columns at full precision. #wrong is empty when the check is off.
std::string csv_line(std::string_view collective, std::string_view transport,
                     std::string_view algorithm, int ranks, const Row& row);

/// The table's header lines before the ceilings and the column titles: nccl-tests' with the
/// tool's name, the transport and every rank.
std::string table_preamble(std::string_view tool, std::string_view transport, const RunInfo& info);

/// nccl-tests' human-readable table, with strata-perf's header.
class TableSink final : public RowSink {
 public:
  explicit TableSink(std::FILE* out) : out_(out) {}

  void begin(const RunInfo& info) override;
  void row(const Row& row) override;
  void end(const Summary& summary) override;

 private:
  std::FILE* out_;
  std::string_view collective_;
  RunInfo info_;
  std::optional<Row> last_;
};

/// One CSV line per row (csv_line) after kCsvHeader.
class CsvSink final : public RowSink {
 public:
  explicit CsvSink(const std::string& path) : file_(path) {}

  void begin(const RunInfo& info) override;
  void row(const Row& row) override;
  void end(const Summary&) override {}

 private:
  OutputFile file_;
  std::string collective_, transport_, algorithm_;
  int ranks_ = 0;
};

/// One JSON document, written at the end: the settings, the ranks, the rows and the summary.
class JsonSink final : public RowSink {
 public:
  explicit JsonSink(const std::string& path) : file_(path) {}

  void begin(const RunInfo& info) override;
  void row(const Row& row) override;
  void end(const Summary& summary) override;

 private:
  OutputFile file_;
  nlohmann::json document_;
  RunInfo info_;
  std::optional<Row> last_;
};

}  // namespace strata::perf
