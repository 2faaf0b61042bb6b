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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <strata/communicator/collective.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

using communicator::Collective;

/// Parses a byte count as nccl-tests does: a decimal number (a fraction is allowed: "1.5K"),
/// optionally followed by one of K, M, G (binary, either case). Returns nothing for an empty or
/// negative number, an unknown suffix, trailing characters, a fraction of a byte, or a value
/// that does not fit in size_t.
std::optional<std::size_t> parse_size(std::string_view text);

/// "8", "1K", "16M", "1.5K": `bytes` with the largest binary suffix that divides it into a
/// number with at most one decimal (for progress lines and headers; not nccl-tests').
std::string format_size(std::size_t bytes);

/// The requested sizes of a sweep: min, min·factor, min·factor², ... up to max (nccl-tests'
/// -b, -e, -f). A factor below 2 gives min alone; the sweep stops before a size would overflow.
std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes,
                                     std::size_t factor);

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
std::string format_time_us(double microseconds);

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
std::string table_header();

/// One row of the table, with its newline: "           8             2     float     sum      -1
///    6.21    0.00    0.00      0    6.23    0.00    0.00      0".
std::string table_row(const Row& row);

/// The footer: "# Out of bounds values : 0 OK" and "# Avg bus bandwidth    : 1.234".
/// `out_of_bounds` counts the (rank, row, placement) checks that found a wrong element, as
/// nccl-tests counts them; the average is over every out-of-place and in-place busbw.
std::string table_footer(std::int64_t out_of_bounds, double average_busbw_gbps);

}  // namespace strata::perf
