// benchmarks/perf/nccl_format.hpp — the arithmetic and the text of nccl-tests' reports, as pure
// functions: sizes with K/M/G suffixes, what "size" and "count" mean per collective, algorithm
// and bus bandwidth, and the fixed-width table lines.
//
// The conventions are nccl-tests' (https://github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md and
// src/common.cu), so that strata-perf's numbers can be put next to theirs:
//   - sizes: "8", "256M", "1G"; suffixes are binary (K = 1024) and case-insensitive;
//   - size S of a row: the largest buffer of one rank in bytes. all_gather: the output
//     (n · count per rank); reduce_scatter: the input (n · count per rank); the others: the
//     buffer. "count" is the count per rank the collective is called with;
//   - algbw = S / t, busbw = algbw · factor with factor 2(n-1)/n for all_reduce, (n-1)/n for
//     all_gather and reduce_scatter, 1 for broadcast and reduce; GB = 1e9 bytes;
//   - times are printed with 2 decimals below 100 us, 1 below 10 ms, none above.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

using communicator::Collective;

/// Parses a byte count as nccl-tests does: a decimal number (a fraction is allowed: "1.5K"),
/// optionally followed by one of K, M, G (binary, either case). Returns nothing for an empty or
/// negative number, an unknown suffix, trailing characters, a fraction of a byte, or a value
/// that does not fit in size_t.
inline std::optional<std::size_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t pos = 0;
  std::uint64_t whole = 0;
  bool any_digit = false;
  // Integers are parsed exactly; a fraction is kept as numerator / 10^k so that "0.5K" is 512.
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    const auto digit = static_cast<std::uint64_t>(text[pos] - '0');
    if (whole > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    whole = whole * 10 + digit;
    any_digit = true;
    ++pos;
  }
  std::uint64_t fraction = 0;
  std::uint64_t fraction_scale = 1;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (fraction_scale >= 1'000'000'000ULL) return std::nullopt;  // more digits than bytes
      fraction = fraction * 10 + static_cast<std::uint64_t>(text[pos] - '0');
      fraction_scale *= 10;
      any_digit = true;
      ++pos;
    }
  }
  if (!any_digit) return std::nullopt;
  std::uint64_t unit = 1;
  if (pos < text.size()) {
    switch (text[pos]) {
      case 'K':
      case 'k':
        unit = std::uint64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        unit = std::uint64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        unit = std::uint64_t{1} << 30;
        break;
      default:
        return std::nullopt;
    }
    ++pos;
  }
  if (pos != text.size()) return std::nullopt;
  if (whole > std::numeric_limits<std::uint64_t>::max() / unit) return std::nullopt;
  const std::uint64_t fraction_bytes = fraction * unit;
  if (fraction_bytes % fraction_scale != 0) return std::nullopt;  // not a whole number of bytes
  const std::uint64_t bytes = whole * unit + fraction_bytes / fraction_scale;
  if (bytes < whole * unit || bytes > std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

/// "8", "1K", "16M", "1.5K": `bytes` with the largest binary suffix that divides it into a
/// number with at most one decimal (for progress lines and headers; not nccl-tests').
inline std::string format_size(std::size_t bytes) {
  constexpr std::string_view kSuffixes[] = {"G", "M", "K"};
  constexpr int kShifts[] = {30, 20, 10};
  for (int i = 0; i < 3; ++i) {
    const std::size_t unit = std::size_t{1} << kShifts[i];
    if (bytes < unit) continue;
    if (bytes % unit == 0) return fmt::format("{}{}", bytes / unit, kSuffixes[i]);
    if ((bytes * 10) % unit == 0)
      return fmt::format("{:.1f}{}", static_cast<double>(bytes) / static_cast<double>(unit),
                         kSuffixes[i]);
  }
  return fmt::format("{}", bytes);
}

/// The requested sizes of a sweep: min, min·factor, min·factor², ... up to max (nccl-tests'
/// -b, -e, -f). A factor below 2 gives min alone; the sweep stops before a size would overflow.
inline std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes,
                                            std::size_t factor) {
  std::vector<std::size_t> sizes;
  if (min_bytes > max_bytes) return sizes;
  std::size_t size = min_bytes;
  while (true) {
    sizes.push_back(size);
    // A size of 0 never grows: one row, like a factor of 1.
    if (factor < 2 || size == 0 || size > max_bytes / factor) break;
    size *= factor;
  }
  return sizes;
}

/// The buffers of one row of the sweep, for one collective, element size and group size.
struct CollectiveSizes {
  std::size_t send_count = 0;   ///< elements of one rank's input
  std::size_t recv_count = 0;   ///< elements of one rank's output
  std::size_t param_count = 0;  ///< the count the collective is called with ("count" column)
  std::size_t bytes = 0;        ///< the "size" column: the larger buffer, in bytes
};

/// What nccl-tests runs for a requested size of `requested_bytes`: count = requested / element
/// size (rounded down); all_gather sends count/n per rank and gathers n times that;
/// reduce_scatter reduces n · (count/n) into count/n per rank; the others use count as is.
/// `element_bytes` and `ranks` must be positive.
constexpr CollectiveSizes collective_sizes(Collective kind, std::size_t requested_bytes,
                                           std::size_t element_bytes, int ranks) noexcept {
  const std::size_t count = requested_bytes / element_bytes;
  const auto n = static_cast<std::size_t>(ranks);
  CollectiveSizes sizes;
  switch (kind) {
    case Collective::all_gather:
      sizes.send_count = count / n;
      sizes.recv_count = sizes.send_count * n;
      sizes.param_count = sizes.send_count;
      break;
    case Collective::reduce_scatter:
      sizes.recv_count = count / n;
      sizes.send_count = sizes.recv_count * n;
      sizes.param_count = sizes.recv_count;
      break;
    case Collective::all_reduce:
    case Collective::broadcast:
    case Collective::reduce:
    case Collective::barrier:
      sizes.send_count = count;
      sizes.recv_count = count;
      sizes.param_count = count;
      break;
  }
  const std::size_t larger =
      sizes.send_count > sizes.recv_count ? sizes.send_count : sizes.recv_count;
  sizes.bytes = larger * element_bytes;
  return sizes;
}

/// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw · factor, which makes
/// the number comparable with the link speed whatever the number of ranks n.
constexpr double bus_bandwidth_factor(Collective kind, int ranks) noexcept {
  const double n = ranks;
  switch (kind) {
    case Collective::all_reduce:
      return 2.0 * (n - 1.0) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
      return (n - 1.0) / n;
    case Collective::broadcast:
    case Collective::reduce:
      return 1.0;
    case Collective::barrier:
      break;
  }
  return 0.0;
}

/// Algorithm bandwidth in GB/s (1e9 bytes per second): the row's size over the time of one call.
constexpr double algorithm_bandwidth_gbps(std::size_t bytes, double seconds) noexcept {
  return seconds > 0 ? static_cast<double>(bytes) / 1.0e9 / seconds : 0.0;
}

/// Bus bandwidth in GB/s: algbw times the collective's factor.
constexpr double bus_bandwidth_gbps(Collective kind, int ranks, std::size_t bytes,
                                    double seconds) noexcept {
  return algorithm_bandwidth_gbps(bytes, seconds) * bus_bandwidth_factor(kind, ranks);
}

/// The name nccl-tests prints for `op` in the redop column ("sum", "prod", "min", "max", "avg").
constexpr std::string_view nccl_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::product:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::mean:
      return "avg";
  }
  return "invalid";
}

/// A time in microseconds as nccl-tests prints it, 7 wide: "   6.21", "  184.8", "  80922".
inline std::string format_time_us(double microseconds) {
  if (microseconds >= 10000.0) return fmt::format("{:7.0f}", microseconds);
  if (microseconds >= 100.0) return fmt::format("{:7.1f}", microseconds);
  return fmt::format("{:7.2f}", microseconds);
}

/// One half (out-of-place or in-place) of a table row.
struct Measurement {
  double time_us = 0;     ///< average time of one call, the slowest rank's
  double algbw_gbps = 0;  ///< size / time
  double busbw_gbps = 0;  ///< algbw · the collective's factor
  /// Wrong elements summed over all ranks; empty when the data check is off.
  std::optional<std::int64_t> wrong{};
  /// Ranks that found at least one wrong element (nccl-tests' "out of bounds values" count).
  std::int64_t ranks_wrong = 0;
};

/// One line of the table, whoever produced it (a measurement, a model, another library).
struct Row {
  std::size_t bytes = 0;  ///< the "size" column
  std::size_t count = 0;  ///< the "count" column
  std::string type;       ///< nccl-tests' type name ("float", "half", ...)
  std::string redop;      ///< nccl-tests' op name, "none" for collectives that do not reduce
  int root = -1;          ///< -1 for collectives without a root
  Measurement out_of_place;
  Measurement in_place;
};

/// The three header lines of the table (nccl-tests' layout, column for column).
inline std::string table_header() {
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                  "
                 "     in-place\n",
                 "", "", "", "", "");
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  "
                 "{:>6} {:>6}\n",
                 "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong");
  fmt::format_to(out,
                 "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  "
                 "{:>6}  {:>5}\n",
                 "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                 "(GB/s)", "");
  return text;
}

/// One row of the table, with its newline: "           8             2     float     sum      -1
///    6.21    0.00    0.00      0    6.23    0.00    0.00      0".
inline std::string table_row(const Row& row) {
  std::string text = fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", row.bytes, row.count,
                                 row.type, row.redop, row.root);
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    const std::string wrong = m->wrong ? fmt::format("{}", *m->wrong) : std::string("N/A");
    fmt::format_to(std::back_inserter(text), "  {}  {:6.2f}  {:6.2f}  {:>5}",
                   format_time_us(m->time_us), m->algbw_gbps, m->busbw_gbps, wrong);
  }
  text += '\n';
  return text;
}

/// The footer: "# Out of bounds values : 0 OK" and "# Avg bus bandwidth    : 1.234".
/// `out_of_bounds` counts the (rank, row, placement) checks that found a wrong element, as
/// nccl-tests counts them; the average is over every out-of-place and in-place busbw.
inline std::string table_footer(std::int64_t out_of_bounds, double average_busbw_gbps) {
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:g} \n#\n",
                     out_of_bounds, out_of_bounds != 0 ? "FAILED" : "OK", average_busbw_gbps);
}

}  // namespace strata::perf
