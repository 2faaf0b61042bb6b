// benchmarks/perf/ceiling_report.hpp — `strata-perf --ceiling`: this machine's limits, measured
// in the same run as the collectives (support/ceiling.hpp), as '#' lines for the table's header.
//
// For a 2-rank all-reduce, nccl-tests' busbw equals the bytes each rank sends (and receives) per
// second, so the full-duplex TCP rate each way is the ceiling a TCP all-reduce's busbw can
// approach; the round trips bound small-message latency (a sleeping wait against a polling one),
// and the single-core memcpy and add rates bound the in-process collectives.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "ceiling.hpp"

namespace strata::perf {

/// What --ceiling measured; rates in bytes per second, round trips in microseconds.
struct Ceilings {
  double tcp_duplex = 0;       ///< each way, kernel-tuned socket buffers
  double tcp_duplex_1mib = 0;  ///< each way, 1 MiB socket buffers
  double round_trip_sleeping_us = 0;
  double round_trip_polling_us = 0;
  double memcpy = 0;  ///< bytes read + written, one core
  double add = 0;     ///< out = a + b over floats, bytes read + written, one core
};

inline Ceilings measure_ceilings() {
  constexpr std::size_t kDuplexBytes = std::size_t{512} << 20;
  constexpr std::size_t kBandwidthBytes = std::size_t{64} << 20;
  Ceilings c;
  c.tcp_duplex = bench::tcp_duplex_bytes_per_second(kDuplexBytes, 0);
  c.tcp_duplex_1mib = bench::tcp_duplex_bytes_per_second(kDuplexBytes, 1 << 20);
  using Micros = std::chrono::duration<double, std::micro>;
  c.round_trip_sleeping_us = Micros(bench::tcp_round_trip(false)).count();
  c.round_trip_polling_us = Micros(bench::tcp_round_trip(true)).count();
  c.memcpy = bench::memcpy_bytes_per_second(kBandwidthBytes);
  c.add = bench::add_bytes_per_second(kBandwidthBytes);
  return c;
}

inline std::string format_ceilings(const Ceilings& c) {
  return fmt::format(
      "# Ceiling (this machine, this run):\n"
      "#   loopback TCP, two processes sending both ways at once: {:.2f} GB/s each way "
      "(kernel buffers), {:.2f} GB/s (1 MiB buffers)\n"
      "#   loopback TCP 1-byte round trip: {:.1f} us sleeping in recv, {:.1f} us polling\n"
      "#   one core, 64 MiB arrays (bytes read + written): memcpy {:.1f} GB/s, "
      "out = a + b {:.1f} GB/s\n",
      c.tcp_duplex / 1e9, c.tcp_duplex_1mib / 1e9, c.round_trip_sleeping_us,
      c.round_trip_polling_us, c.memcpy / 1e9, c.add / 1e9);
}

}  // namespace strata::perf
