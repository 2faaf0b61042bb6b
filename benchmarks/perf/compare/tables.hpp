// benchmarks/perf/compare/tables.hpp — the tables and the CSV of `strata-perf --compare`: every
// contender's series over all launches, merged, and shown per size as the median over launches
// of the in-place time, the bus bandwidth of that time with strata's ratios to the best peers,
// and (over several launches) the fastest and slowest launch.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <perf/ceiling_report.hpp>
#include <perf/compare/series.hpp>
#include <perf/nccl_format.hpp>

namespace strata::perf {

/// Every contender's series over all launches, merged: per label and size, the in-place times.
class Comparison {
 public:
  void add(const std::vector<Series>& launch);

  /// Wrong values over every launch of every contender.
  long long wrong() const;

  /// The two tables (median time, busbw of that time, and strata's ratios) as Markdown; with
  /// the ceilings (2 ranks), strata tcp's share of the full-duplex TCP rate for its size. A
  /// program with several algorithms gets a "best" column after them: per size, its fastest
  /// algorithm's median.
  std::string tables(Collective kind, int ranks, int launches,
                     const Ceilings* ceilings = nullptr) const;

  /// Long-form CSV: one line per contender and size with the median time and its busbw.
  std::string csv(Collective kind, int ranks) const;

 private:
  struct Entry {
    bool strata = false;
    bool tcp = false;
    std::string family;
    long long wrong = 0;
    std::map<std::size_t, std::vector<double>> times;
  };
  /// A column of the tables: one series, or (several members) a family's best.
  struct Column {
    std::string label;
    std::vector<std::string> members;
  };

  std::vector<Column> columns() const;
  std::optional<double> column_time(const Column& column, std::size_t bytes) const;
  std::string time_table(const std::vector<Column>& columns) const;
  std::string busbw_table(Collective kind, int ranks, const std::vector<Column>& columns,
                          const Ceilings* ceilings) const;
  std::string busbw_row(Collective kind, int ranks, std::size_t bytes,
                        const std::vector<Column>& columns, const Ceilings* ceilings) const;
  std::string spread_table(int ranks, int launches) const;
  std::optional<std::pair<double, double>> time_range(const std::string& label,
                                                      std::size_t bytes) const;
  std::optional<double> median_time(const std::string& label, std::size_t bytes) const;

  std::map<std::string, Entry> entries_;
  std::vector<std::string> order_;
  std::vector<std::size_t> sizes_;
};

}  // namespace strata::perf
