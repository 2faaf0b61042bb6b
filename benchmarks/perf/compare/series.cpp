// benchmarks/perf/compare/series.cpp — parsing a contender's CSV (series.hpp).
#include <perf/compare/series.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

namespace strata::perf {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ','))
    fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

double to_double(const std::string& text, std::string_view what) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0)
    throw std::runtime_error(fmt::format("bad {} '{}'", what, text));
  return value;
}

// Where the columns --compare reads are in a CSV with `header`.
struct Columns {
  std::size_t algo, bytes, time, wrong;
};

Columns columns_of(const std::vector<std::string>& header, const std::string& path) {
  auto column = [&](std::string_view name) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end())
      throw std::runtime_error(fmt::format("'{}' has no column '{}'", path, name));
    return static_cast<std::size_t>(it - header.begin());
  };
  return {column("algo"), column("size_bytes"), column("ip_time_us"), column("ip_wrong")};
}

PeerRow row_of(const std::vector<std::string>& fields, const Columns& at) {
  PeerRow row;
  row.bytes = static_cast<std::size_t>(to_double(fields[at.bytes], "size"));
  row.time_us = to_double(fields[at.time], "time");
  row.wrong =
      fields[at.wrong].empty() ? 0 : static_cast<long long>(to_double(fields[at.wrong], "#wrong"));
  return row;
}

}  // namespace

std::vector<Series> read_series_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read '{}'", path));
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error(fmt::format("'{}' is empty", path));
  const auto header = split_csv_line(line);
  const Columns at = columns_of(header, path);
  std::vector<Series> series;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto fields = split_csv_line(line);
    if (fields.size() < header.size())
      throw std::runtime_error(fmt::format("'{}': short line '{}'", path, line));
    const std::string& label = fields[at.algo];
    auto it = std::find_if(series.begin(), series.end(),
                           [&](const Series& s) { return s.label == label; });
    if (it == series.end()) {
      series.push_back(Series{label, false, false, {}});
      it = series.end() - 1;
    }
    it->rows.push_back(row_of(fields, at));
  }
  return series;
}

}  // namespace strata::perf
