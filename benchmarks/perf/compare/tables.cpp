// benchmarks/perf/compare/tables.cpp — `strata-perf --compare`'s tables and CSV (tables.hpp).
#include <perf/compare/tables.hpp>

#include <algorithm>

#include <fmt/format.h>

namespace strata::perf {

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string format_time(double us) {
  return us >= 1e4   ? fmt::format("{:.0f}", us)
         : us >= 100 ? fmt::format("{:.1f}", us)
                     : fmt::format("{:.2f}", us);
}

std::string ratio(double ours, double theirs) {
  return ours > 0 && theirs > 0 ? fmt::format(" {:.2f}× |", ours / theirs) : std::string(" – |");
}

// A table's title and column heads; `ratios` adds strata's ratio columns.
template <class Columns>
std::string table_head(std::string_view what, const Columns& columns, bool ratios,
                       bool with_ceiling, int ranks, int launches) {
  std::string line = "| size |";
  std::string rule = "| ---: |";
  for (const auto& column : columns) {
    line += fmt::format(" {} |", column.label);
    rule += " ---: |";
  }
  if (ratios) {
    line +=
        " strata tcp / best TCP peer | strata shm / OpenMPI default | best strata / best peer |";
    rule += " ---: | ---: | ---: |";
    if (with_ceiling) {
      line += " strata tcp / TCP ceiling |";
      rule += " ---: |";
    }
  }
  return fmt::format("{}, median of {} launch{}, {} ranks, in place:\n\n{}\n{}\n", what, launches,
                     launches == 1 ? "" : "es", ranks, line, rule);
}

}  // namespace

void Comparison::add(const std::vector<Series>& launch) {
  for (const Series& s : launch) {
    auto& entry = entries_[s.label];
    entry.strata = s.strata;
    entry.tcp = s.tcp;
    entry.family = s.family;
    if (std::find(order_.begin(), order_.end(), s.label) == order_.end()) order_.push_back(s.label);
    for (const PeerRow& row : s.rows) {
      entry.times[row.bytes].push_back(row.time_us);
      entry.wrong += row.wrong;
      sizes_.insert(std::lower_bound(sizes_.begin(), sizes_.end(), row.bytes), row.bytes);
      sizes_.erase(std::unique(sizes_.begin(), sizes_.end()), sizes_.end());
    }
  }
}

long long Comparison::wrong() const {
  long long total = 0;
  for (const auto& [label, entry] : entries_)
    total += entry.wrong;
  return total;
}

std::string Comparison::tables(Collective kind, int ranks, int launches,
                               const Ceilings* ceilings) const {
  const auto all = columns();
  std::string out = table_head("Time per call (µs)", all, false, false, ranks, launches);
  out += time_table(all) + '\n';
  out += table_head("Bus bandwidth (GB/s, nccl-tests' busbw)", all, true, ceilings != nullptr,
                    ranks, launches);
  out += busbw_table(kind, ranks, all, ceilings);
  // A median hides how far apart the launches were; on a shared machine that is most of
  // what there is to know about a single figure.
  if (launches > 1) out += spread_table(ranks, launches);
  return out;
}

std::string Comparison::csv(Collective kind, int ranks) const {
  std::string out =
      "contender,strata,tcp,ranks,size_bytes,median_time_us,busbw_gbps,launches,min_time_us,"
      "max_time_us\n";
  for (const auto& label : order_) {
    const Entry& entry = entries_.at(label);
    for (const auto& [bytes, times] : entry.times) {
      const double t = median(times);
      const auto [fastest, slowest] = std::minmax_element(times.begin(), times.end());
      out += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", label, entry.strata ? 1 : 0,
                         entry.tcp ? 1 : 0, ranks, bytes, t,
                         bus_bandwidth_gbps(kind, ranks, bytes, t * 1e-6), times.size(), *fastest,
                         *slowest);
    }
  }
  return out;
}

// Every series, and after the last member of a family with several, the family's best.
std::vector<Comparison::Column> Comparison::columns() const {
  std::vector<Column> columns;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    columns.push_back({order_[i], {order_[i]}});
    const std::string& family = entries_.at(order_[i]).family;
    const bool last_of_family =
        !family.empty() && (i + 1 == order_.size() || entries_.at(order_[i + 1]).family != family);
    if (!last_of_family) continue;
    Column best{family + " best", {}};
    for (const auto& label : order_)
      if (entries_.at(label).family == family) best.members.push_back(label);
    if (best.members.size() > 1) columns.push_back(std::move(best));
  }
  return columns;
}

std::optional<double> Comparison::column_time(const Column& column, std::size_t bytes) const {
  std::optional<double> fastest;
  for (const auto& label : column.members)
    if (const auto t = median_time(label, bytes); t && (!fastest || *t < *fastest)) fastest = t;
  return fastest;
}

std::string Comparison::time_table(const std::vector<Column>& columns) const {
  std::string out;
  for (const std::size_t bytes : sizes_) {
    out += fmt::format("| {} |", format_size(bytes));
    for (const auto& column : columns) {
      const auto t = column_time(column, bytes);
      out += t ? fmt::format(" {} |", format_time(*t)) : std::string(" – |");
    }
    out += '\n';
  }
  return out;
}

std::string Comparison::busbw_table(Collective kind, int ranks, const std::vector<Column>& columns,
                                    const Ceilings* ceilings) const {
  std::string out;
  for (const std::size_t bytes : sizes_)
    out += busbw_row(kind, ranks, bytes, columns, ceilings);
  return out;
}

std::string Comparison::busbw_row(Collective kind, int ranks, std::size_t bytes,
                                  const std::vector<Column>& columns,
                                  const Ceilings* ceilings) const {
  std::string out = fmt::format("| {} |", format_size(bytes));
  double strata_tcp = 0, strata_best = 0, tcp_peer = 0, any_peer = 0;
  double strata_shm = 0, mpi_default = 0;  // processes of one host, each at its best
  for (const auto& column : columns) {
    const auto t = column_time(column, bytes);
    if (!t) {
      out += " – |";
      continue;
    }
    const double busbw = bus_bandwidth_gbps(kind, ranks, bytes, *t * 1e-6);
    out += fmt::format(" {:.3g} |", busbw);
    const Entry& entry = entries_.at(column.members.front());
    if (column.label == "strata shm") strata_shm = busbw;
    if (column.label == "mpi default") mpi_default = busbw;
    if (entry.strata) {
      strata_best = std::max(strata_best, busbw);
      if (entry.tcp) strata_tcp = std::max(strata_tcp, busbw);
    } else {
      any_peer = std::max(any_peer, busbw);
      if (entry.tcp) tcp_peer = std::max(tcp_peer, busbw);
    }
  }
  out +=
      ratio(strata_tcp, tcp_peer) + ratio(strata_shm, mpi_default) + ratio(strata_best, any_peer);
  // Below 1 MiB a message fits the socket buffers and is no streaming measurement.
  if (ceilings != nullptr)
    out +=
        bytes >= (std::size_t{1} << 20)
            ? fmt::format(" {:.0f}% |", 100 * strata_tcp / (ceilings->tcp_duplex_for(bytes) / 1e9))
            : std::string(" – |");
  return out + '\n';
}

std::string Comparison::spread_table(int ranks, int launches) const {
  std::string out = fmt::format(
      "\nSpread of the time per call over the {} launches (µs, fastest–slowest), {} ranks, "
      "in place:\n\n| size |",
      launches, ranks);
  std::string rule = "| ---: |";
  for (const auto& label : order_) {
    out += fmt::format(" {} |", label);
    rule += " ---: |";
  }
  out += '\n' + rule + '\n';
  for (const std::size_t bytes : sizes_) {
    out += fmt::format("| {} |", format_size(bytes));
    for (const auto& label : order_) {
      const auto range = time_range(label, bytes);
      out += range ? fmt::format(" {}–{} |", format_time(range->first), format_time(range->second))
                   : std::string(" – |");
    }
    out += '\n';
  }
  return out;
}

std::optional<std::pair<double, double>> Comparison::time_range(const std::string& label,
                                                                std::size_t bytes) const {
  const Entry& entry = entries_.at(label);
  const auto it = entry.times.find(bytes);
  if (it == entry.times.end() || it->second.empty()) return std::nullopt;
  const auto [fastest, slowest] = std::minmax_element(it->second.begin(), it->second.end());
  return std::pair{*fastest, *slowest};
}

std::optional<double> Comparison::median_time(const std::string& label, std::size_t bytes) const {
  const Entry& entry = entries_.at(label);
  const auto it = entry.times.find(bytes);
  if (it == entry.times.end() || it->second.empty()) return std::nullopt;
  return median(it->second);
}

}  // namespace strata::perf
