// benchmarks/perf/ceiling_report.cpp — measuring and printing --ceiling's limits
// (ceiling_report.hpp).
#include <perf/ceiling_report.hpp>

#include <chrono>
#include <fstream>

#include <fmt/format.h>

#include <perf/bind.hpp>
#include <perf/nccl_format.hpp>

#include "ceiling.hpp"

namespace strata::perf {

Ceilings measure_ceilings() {
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
  c.congestion = default_congestion_control();
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

Ceilings best_of(const Ceilings& a, const Ceilings& b) {
  Ceilings c = a;
  for (auto field : {&Ceilings::tcp_duplex, &Ceilings::tcp_duplex_1mib_buffers,
                     &Ceilings::tcp_duplex_reno, &Ceilings::tcp_duplex_memory,
                     &Ceilings::tcp_duplex_memory_reno, &Ceilings::memcpy, &Ceilings::add})
    c.*field = std::max(a.*field, b.*field);
  c.round_trip_sleeping_us = std::min(a.round_trip_sleeping_us, b.round_trip_sleeping_us);
  c.round_trip_polling_us = std::min(a.round_trip_polling_us, b.round_trip_polling_us);
  return c;
}

std::string format_ceilings(const Ceilings& c, int measurements) {
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

double measure_tcp_stream_seconds(std::size_t bytes, int warmup, int iters,
                                  std::optional<int> peer_cpu, const std::string& congestion) {
  const auto median = bench::tcp_stream(bytes, warmup, iters, peer_cpu.value_or(-1), congestion);
  return std::chrono::duration<double>(median).count();
}

std::string default_congestion_control() {
  std::string name;
  std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control") >> name;
  return name.empty() ? std::string("the kernel's default") : name;
}

double measure_tcp_ping_pong_us(std::size_t bytes, bool polling, std::optional<int> peer_cpu) {
  const auto median = bench::tcp_ping_pong(bytes, polling, 2000, peer_cpu.value_or(-1));
  return std::chrono::duration<double, std::micro>(median).count();
}

}  // namespace strata::perf
