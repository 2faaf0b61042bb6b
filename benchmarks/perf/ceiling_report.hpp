// benchmarks/perf/ceiling_report.hpp — `strata-perf --ceiling`: this machine's limits, measured
// in the same run as the collectives (support/ceiling.hpp), as '#' lines for the table's header.
//
// For a 2-rank all-reduce, nccl-tests' busbw equals the bytes each rank sends (and receives) per
// second, so the full-duplex TCP rate each way is the ceiling a TCP all-reduce's busbw can
// approach, measured with arrays in cache and in memory (a large collective's data comes from
// memory), with the kernel's congestion control and with reno; the round trips bound small-message
// latency (a sleeping wait against a polling one), and the single-core memcpy and add rates bound
// the in-process collectives.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "bind.hpp"
#include "ceiling.hpp"
#include "nccl_format.hpp"

namespace strata::perf {

/// What --ceiling measured; rates in bytes per second, round trips in microseconds.
struct Ceilings {
  /// From this size on a collective's data no longer stays in cache: it is held to the
  /// full-duplex rate measured with arrays in memory.
  static constexpr std::size_t kMemoryBytes = std::size_t{16} << 20;

  std::string congestion;  ///< the kernel's default TCP congestion control
  std::string cpus;        ///< where they were measured, e.g. "CPUs 0-1"
  // Full-duplex loopback TCP, bytes per second each way. In cache: 1 MiB arrays; in memory:
  // 64 MiB arrays. Buffers: the kernel's autotuning unless "1mib_buffers".
  double tcp_duplex = 0;
  double tcp_duplex_1mib_buffers = 0;
  double tcp_duplex_reno = 0;  ///< reno: what strata runs within one host
  double tcp_duplex_memory = 0;
  double tcp_duplex_memory_reno = 0;
  double round_trip_sleeping_us = 0;
  double round_trip_polling_us = 0;
  double memcpy = 0;  ///< bytes read + written, one core
  double add = 0;     ///< out = a + b over floats, bytes read + written, one core

  /// What a 2-rank TCP all-reduce of `bytes` is held to: the best full-duplex rate of any
  /// socket setting, with the data in cache or in memory as the collective's would be.
  double tcp_duplex_for(std::size_t bytes) const noexcept {
    if (bytes >= kMemoryBytes) return std::max(tcp_duplex_memory, tcp_duplex_memory_reno);
    return std::max({tcp_duplex, tcp_duplex_1mib_buffers, tcp_duplex_reno});
  }
};

inline Ceilings measure_ceilings() {
  constexpr std::size_t kDuplexBytes = std::size_t{512} << 20;
  constexpr std::size_t kBandwidthBytes = std::size_t{64} << 20;
  constexpr std::size_t kCached = std::size_t{1} << 20;
  // The machine is shared and noisy, and a ceiling is what it can do: the best of three.
  auto duplex = [](int socket_buffer, const std::string& congestion, std::size_t array) {
    double best = 0;
    for (int i = 0; i < 3; ++i)
      best = std::max(
          best, bench::tcp_duplex_bytes_per_second(kDuplexBytes, socket_buffer, congestion, array));
    return best;
  };
  Ceilings c;
  c.cpus = describe_affinity();
  std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control") >> c.congestion;
  if (c.congestion.empty()) c.congestion = "the kernel's default";
  c.tcp_duplex = duplex(0, {}, kCached);
  c.tcp_duplex_1mib_buffers = duplex(1 << 20, {}, kCached);
  c.tcp_duplex_reno = duplex(0, "reno", kCached);
  c.tcp_duplex_memory = duplex(0, {}, kBandwidthBytes);
  c.tcp_duplex_memory_reno = duplex(0, "reno", kBandwidthBytes);
  using Micros = std::chrono::duration<double, std::micro>;
  c.round_trip_sleeping_us = Micros(bench::tcp_round_trip(false)).count();
  c.round_trip_polling_us = Micros(bench::tcp_round_trip(true)).count();
  c.memcpy = bench::memcpy_bytes_per_second(kBandwidthBytes);
  c.add = bench::add_bytes_per_second(kBandwidthBytes);
  return c;
}

/// Each limit at its best over two measurements (rates highest, round trips shortest).
inline Ceilings best_of(const Ceilings& a, const Ceilings& b) {
  Ceilings c = a;
  for (auto field : {&Ceilings::tcp_duplex, &Ceilings::tcp_duplex_1mib_buffers,
                     &Ceilings::tcp_duplex_reno, &Ceilings::tcp_duplex_memory,
                     &Ceilings::tcp_duplex_memory_reno, &Ceilings::memcpy, &Ceilings::add})
    c.*field = std::max(a.*field, b.*field);
  c.round_trip_sleeping_us = std::min(a.round_trip_sleeping_us, b.round_trip_sleeping_us);
  c.round_trip_polling_us = std::min(a.round_trip_polling_us, b.round_trip_polling_us);
  return c;
}

/// The '#' lines; `measurements` > 1 says each figure is the best of that many.
inline std::string format_ceilings(const Ceilings& c, int measurements = 1) {
  const std::string title = measurements > 1
                                ? fmt::format(
                                      "this machine, this run, {}, best of {} measurements, one "
                                      "before each launch",
                                      c.cpus, measurements)
                                : fmt::format("this machine, this run, {}", c.cpus);
  return fmt::format(
      "# Ceiling ({}):\n"
      "#   loopback TCP, two processes sending both ways at once, GB/s each way:\n"
      "#     1 MiB arrays (in cache): {:.2f} ({}), {:.2f} ({}, 1 MiB socket buffers), "
      "{:.2f} (reno)\n"
      "#     64 MiB arrays (in memory, held to from {} up): {:.2f} ({}), {:.2f} (reno)\n"
      "#   loopback TCP 1-byte round trip: {:.1f} us sleeping in recv, {:.1f} us polling\n"
      "#   one core, 64 MiB arrays (bytes read + written): memcpy {:.1f} GB/s, "
      "out = a + b {:.1f} GB/s\n",
      title, c.tcp_duplex / 1e9, c.congestion, c.tcp_duplex_1mib_buffers / 1e9, c.congestion,
      c.tcp_duplex_reno / 1e9, format_size(Ceilings::kMemoryBytes), c.tcp_duplex_memory / 1e9,
      c.congestion, c.tcp_duplex_memory_reno / 1e9, c.round_trip_sleeping_us,
      c.round_trip_polling_us, c.memcpy / 1e9, c.add / 1e9);
}

}  // namespace strata::perf
