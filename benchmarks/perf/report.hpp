// benchmarks/perf/report.hpp — where strata-perf's rows go: the nccl-tests table, CSV, JSON and
// a progress line. Only rank 0 has a Reporter; every row it gets is already the group's (times
// are the slowest rank's, wrong counts summed over ranks).
//
// Sinks see the run in three steps, begin (the run's settings and ranks), row (one per size),
// end (the summary), so that another producer of rows (a model of the hardware's ceiling, or a
// second library to compare with) can feed the same sinks.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ceiling_report.hpp"
#include "nccl_format.hpp"
#include "options.hpp"

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
};

/// The share of the full-duplex TCP ceiling that `row`'s busbw reaches, when the run has one
/// to be held to: a 2-rank TCP all-reduce's busbw is what each rank sends each way, comparable
/// to the duplex rate. Other shapes get the ceilings, not a ratio that would mislead.
inline std::optional<double> share_of_tcp_ceiling(const RunInfo& info, const Row& row) {
  const Options& o = info.options;
  if (!info.ceilings || o.transport != Transport::tcp || o.collective != Collective::all_reduce ||
      info.ranks != 2)
    return std::nullopt;
  const double busbw = std::max(row.out_of_place.busbw_gbps, row.in_place.busbw_gbps);
  return busbw / (info.ceilings->tcp_duplex_for(row.bytes) / 1e9);
}

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
  void add(const Row& row) {
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      busbw_sum_ += m->busbw_gbps;
      ++measurements_;
      summary_.out_of_bounds += m->ranks_wrong;
    }
    ++summary_.rows;
  }
  Summary summary() const {
    Summary s = summary_;
    s.average_busbw_gbps =
        measurements_ == 0 ? 0.0 : busbw_sum_ / static_cast<double>(measurements_);
    return s;
  }

 private:
  Summary summary_;
  double busbw_sum_ = 0;
  std::size_t measurements_ = 0;
};

/// A consumer of rows.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void begin(const RunInfo& info) = 0;
  virtual void row(const Row& row) = 0;
  virtual void end(const Summary& summary) = 0;
};

/// An output file, or stdout for "-"; closed on destruction.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path) {
    if (path == "-") {
      file_ = stdout;
      return;
    }
    file_ = std::fopen(path.c_str(), "w");
    if (file_ == nullptr)
      throw CommandLineError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    owned_ = true;
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() {
    if (owned_) std::fclose(file_);
  }
  std::FILE* get() const noexcept { return file_; }

 private:
  std::FILE* file_ = nullptr;
  bool owned_ = false;
};

/// The columns of strata-perf's CSV, which the peers write too (`strata-perf --compare` reads
/// them).
inline constexpr std::string_view kCsvHeader =
    "collective,transport,algo,ranks,size_bytes,count,type,redop,root,"
    "oop_time_us,oop_algbw_gbps,oop_busbw_gbps,oop_wrong,"
    "ip_time_us,ip_algbw_gbps,ip_busbw_gbps,ip_wrong\n";

/// The table's header lines before the ceilings and the column titles: nccl-tests' with the
/// tool's name, the transport and every rank.
inline std::string table_preamble(std::string_view tool, std::string_view transport,
                                  const RunInfo& info) {
  const Options& o = info.options;
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out, "# Collective test starting: {} {}\n", tool, to_string(o.collective));
  fmt::format_to(out,
                 "# nRanks {} transport {} algo {} minBytes {} maxBytes {} step: {}(factor) "
                 "warmup iters: {} iters: {} validation: {}\n",
                 info.ranks, transport, info.algorithm, o.min_bytes, o.max_bytes, o.step_factor,
                 o.warmup_iters, o.iters, o.check ? 1 : 0);
  text += "#\n# Using devices\n";
  for (std::size_t r = 0; r < info.rank_info.size(); ++r) {
    const RankInfo& rank = info.rank_info[r];
    fmt::format_to(out, "#  Rank {:>2} Pid {:>6} on {:>10} {}\n", r, rank.pid, rank.host,
                   rank.where);
  }
  return text + "#\n";
}

/// nccl-tests' human-readable table, with strata-perf's header.
class TableSink final : public RowSink {
 public:
  explicit TableSink(std::FILE* out) : out_(out) {}

  void begin(const RunInfo& info) override {
    const Options& o = info.options;
    collective_ = to_string(o.collective);
    info_ = info;
    std::string text = table_preamble("strata-perf", to_string(o.transport), info);
    if (info.ceilings) text += format_ceilings(*info.ceilings) + "#\n";
    text += table_header();
    write(text);
  }

  void row(const Row& row) override {
    last_ = row;
    write(table_row(row));
  }

  void end(const Summary& summary) override {
    std::string text = table_footer(summary.out_of_bounds, summary.average_busbw_gbps);
    if (const auto share = last_ ? share_of_tcp_ceiling(info_, *last_) : std::nullopt) {
      const double ceiling = info_.ceilings->tcp_duplex_for(last_->bytes);
      text += fmt::format(
          "# Largest size {}: busbw {:.3f} GB/s = {:.0f}% of the full-duplex TCP ceiling "
          "({:.3f} GB/s each way, arrays in {})\n",
          format_size(last_->bytes), *share * ceiling / 1e9, 100 * *share, ceiling / 1e9,
          last_->bytes >= Ceilings::kMemoryBytes ? "memory" : "cache");
    }
    write(text + fmt::format("# Collective test concluded: strata-perf {}\n", collective_));
  }

 private:
  void write(const std::string& text) {
    std::fputs(text.c_str(), out_);
    std::fflush(out_);
  }
  std::FILE* out_;
  std::string_view collective_;
  RunInfo info_;
  std::optional<Row> last_;
};

/// One CSV line per row: the run's collective, transport, algorithm and ranks, then the table's
/// columns at full precision. #wrong is empty when the check is off.
class CsvSink final : public RowSink {
 public:
  explicit CsvSink(const std::string& path) : file_(path) {}

  void begin(const RunInfo& info) override {
    collective_ = std::string(to_string(info.options.collective));
    transport_ = std::string(to_string(info.options.transport));
    algorithm_ = info.algorithm;
    ranks_ = info.ranks;
    write(std::string(kCsvHeader));
  }

  void row(const Row& row) override {
    std::string text =
        fmt::format("{},{},{},{},{},{},{},{},{}", collective_, transport_, algorithm_, ranks_,
                    row.bytes, row.count, row.type, row.redop, row.root);
    for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
      fmt::format_to(std::back_inserter(text), ",{},{},{},{}", m->time_us, m->algbw_gbps,
                     m->busbw_gbps, m->wrong ? fmt::format("{}", *m->wrong) : std::string());
    }
    text += '\n';
    write(text);
  }

  void end(const Summary&) override {}

 private:
  void write(const std::string& text) {
    std::fputs(text.c_str(), file_.get());
    std::fflush(file_.get());  // a sweep that fails half-way keeps the rows it measured
  }
  OutputFile file_;
  std::string collective_, transport_, algorithm_;
  int ranks_ = 0;
};

/// One JSON document, written at the end: the settings, the ranks, the rows and the summary.
class JsonSink final : public RowSink {
 public:
  explicit JsonSink(const std::string& path) : file_(path) {}

  void begin(const RunInfo& info) override {
    const Options& o = info.options;
    document_ = {
        {"tool", "strata-perf"},
        {"collective", to_string(o.collective)},
        {"transport", to_string(o.transport)},
        {"algo", info.algorithm},
        {"ranks", info.ranks},
        {"type", to_string(o.type)},
        {"redop", nullptr},
        {"root", nullptr},
        {"min_bytes", o.min_bytes},
        {"max_bytes", o.max_bytes},
        {"step_factor", o.step_factor},
        {"warmup_iters", o.warmup_iters},
        {"iters", o.iters},
        {"check", o.check},
        {"bind", to_string(o.bind)},
        {"congestion", nullptr},
        {"lend_from_bytes", nullptr},
        {"devices", nlohmann::json::array()},
        {"rows", nlohmann::json::array()},
    };
    if (communicator::reduces(o.collective)) document_["redop"] = nccl_op_name(o.op);
    if (communicator::has_root(o.collective)) document_["root"] = o.root;
    if (o.congestion) document_["congestion"] = *o.congestion;
    if (o.lend_from && *o.lend_from != SIZE_MAX) document_["lend_from_bytes"] = *o.lend_from;
    info_ = info;
    for (std::size_t r = 0; r < info.rank_info.size(); ++r) {
      const RankInfo& rank = info.rank_info[r];
      document_["devices"].push_back(
          {{"rank", r}, {"pid", rank.pid}, {"host", rank.host}, {"where", rank.where}});
    }
    if (info.ceilings) {
      const Ceilings& c = *info.ceilings;
      document_["ceiling"] = {{"tcp_duplex_gbps", c.tcp_duplex / 1e9},
                              {"tcp_duplex_1mib_buffers_gbps", c.tcp_duplex_1mib_buffers / 1e9},
                              {"tcp_duplex_reno_gbps", c.tcp_duplex_reno / 1e9},
                              {"tcp_duplex_memory_gbps", c.tcp_duplex_memory / 1e9},
                              {"tcp_duplex_memory_reno_gbps", c.tcp_duplex_memory_reno / 1e9},
                              {"tcp_congestion_control", c.congestion},
                              {"cpus", c.cpus},
                              {"tcp_round_trip_sleeping_us", c.round_trip_sleeping_us},
                              {"tcp_round_trip_polling_us", c.round_trip_polling_us},
                              {"memcpy_gbps", c.memcpy / 1e9},
                              {"add_gbps", c.add / 1e9}};
    }
  }

  void row(const Row& row) override {
    auto measurement = [](const Measurement& m) {
      nlohmann::json j = {{"time_us", m.time_us},
                          {"algbw_gbps", m.algbw_gbps},
                          {"busbw_gbps", m.busbw_gbps},
                          {"wrong", nullptr}};
      if (m.wrong) j["wrong"] = *m.wrong;
      return j;
    };
    last_ = row;
    document_["rows"].push_back({{"size_bytes", row.bytes},
                                 {"count", row.count},
                                 {"type", row.type},
                                 {"redop", row.redop},
                                 {"root", row.root},
                                 {"out_of_place", measurement(row.out_of_place)},
                                 {"in_place", measurement(row.in_place)}});
  }

  void end(const Summary& summary) override {
    document_["out_of_bounds"] = summary.out_of_bounds;
    document_["ok"] = summary.out_of_bounds == 0;
    document_["avg_busbw_gbps"] = summary.average_busbw_gbps;
    if (const auto share = last_ ? share_of_tcp_ceiling(info_, *last_) : std::nullopt)
      document_["largest_size_share_of_tcp_ceiling"] = *share;
    const std::string text = document_.dump(2) + "\n";
    std::fputs(text.c_str(), file_.get());
    std::fflush(file_.get());
  }

 private:
  OutputFile file_;
  nlohmann::json document_;
  RunInfo info_;
  std::optional<Row> last_;
};

/// "[all_reduce 16M 12/26] in-place" on stderr: rewritten in place on a terminal, one line
/// each otherwise (only with --progress).
class Progress {
 public:
  Progress(bool forced, std::FILE* out = stderr)
      : out_(out), terminal_(::isatty(::fileno(out)) != 0), enabled_(forced || terminal_) {}

  void show(std::string_view text) {
    if (!enabled_) return;
    if (terminal_)
      fmt::print(out_, "\r{}\033[K", text);
    else
      fmt::print(out_, "{}\n", text);
    std::fflush(out_);
  }
  /// Clears the line before the table prints over the same terminal.
  void clear() {
    if (!enabled_ || !terminal_) return;
    fmt::print(out_, "\r\033[K");
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  bool terminal_;
  bool enabled_;
};

/// Rank 0's outputs: the table (stdout, or stderr when CSV or JSON takes stdout), CSV and JSON
/// when asked for, and the progress line.
class Reporter {
 public:
  /// Opens the files named by the options.
  /// @throws CommandLineError when a file cannot be written.
  explicit Reporter(const Options& options) : progress_(options.progress) {
    const bool stdout_taken = options.csv == "-" || options.json == "-";
    sinks_.push_back(std::make_unique<TableSink>(stdout_taken ? stderr : stdout));
    if (options.csv) sinks_.push_back(std::make_unique<CsvSink>(*options.csv));
    if (options.json) sinks_.push_back(std::make_unique<JsonSink>(*options.json));
  }

  void begin(const RunInfo& info) {
    progress_.clear();
    for (auto& sink : sinks_)
      sink->begin(info);
  }
  void row(const Row& row) {
    summary_.add(row);
    progress_.clear();
    for (auto& sink : sinks_)
      sink->row(row);
  }
  Summary end() {
    progress_.clear();
    const Summary summary = summary_.summary();
    for (auto& sink : sinks_)
      sink->end(summary);
    return summary;
  }
  Progress& progress() noexcept { return progress_; }

 private:
  Progress progress_;
  std::vector<std::unique_ptr<RowSink>> sinks_;
  SummaryBuilder summary_;
};

}  // namespace strata::perf
