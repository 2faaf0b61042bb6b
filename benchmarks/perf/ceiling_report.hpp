// benchmarks/perf/ceiling_report.hpp — `strata-perf --ceiling`: this machine's limits, measured
// in the same run as the collectives (support/ceiling.hpp, compiled into ceiling_report.cpp only),
// as '#' lines for the table's header.
//
// For a 2-rank all-reduce, nccl-tests' busbw equals the bytes each rank sends (and receives) per
// second, so the full-duplex TCP rate each way is the ceiling a TCP all-reduce's busbw can
// approach, measured with arrays in cache and in memory (a large collective's data comes from
// memory), with the kernel's congestion control and with reno; the round trips bound small-message
// latency (a sleeping wait against a polling one), and the single-core memcpy and add rates bound
// the in-process collectives.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>

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

/// Measures every limit once, on the CPUs the calling thread may use (seconds of full-speed
/// TCP and memory traffic).
Ceilings measure_ceilings();

/// Each limit at its best over two measurements (rates highest, round trips shortest).
Ceilings best_of(const Ceilings& a, const Ceilings& b);

/// The '#' lines; `measurements` > 1 says each figure is the best of that many.
std::string format_ceilings(const Ceilings& c, int measurements = 1);

/// --transport ps's peer for bandwidth: seconds of one message of `bytes` from this process to a
/// child over loopback TCP (received whole, answered with one byte, both ends polling), the
/// median of `iters` after `warmup`, under TCP congestion control `congestion` (empty: the
/// kernel's default); the child runs on `peer_cpu` (none: where this process may).
double measure_tcp_stream_seconds(std::size_t bytes, int warmup, int iters,
                                  std::optional<int> peer_cpu, const std::string& congestion = {});

/// The kernel's default TCP congestion control (net.ipv4.tcp_congestion_control).
std::string default_congestion_control();

/// --transport ps's peer for latency: the median round trip of a ping-pong of `bytes` each way
/// between this process and a child on loopback TCP, in microseconds, both ends polling
/// (`polling`) or sleeping in recv(2); the child runs on `peer_cpu`.
double measure_tcp_ping_pong_us(std::size_t bytes, bool polling, std::optional<int> peer_cpu);

}  // namespace strata::perf
