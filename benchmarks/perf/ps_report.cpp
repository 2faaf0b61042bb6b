// benchmarks/perf/ps_report.cpp — --transport ps's servers, split, CPU clocks and footer
// (ps_report.hpp).
#include <perf/ps_report.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <vector>

#include <sched.h>
#include <sys/types.h>
#include <unistd.h>

#include <fmt/format.h>

#include <perf/bind.hpp>
#include <perf/nccl_format.hpp>
#include <perf/output.hpp>

#include <strata/ps/server.hpp>

namespace strata::perf {

std::vector<PsShard> split_over_servers(std::size_t count, int servers) {
  const std::size_t n = std::min(count, static_cast<std::size_t>(std::max(servers, 1)));
  std::vector<PsShard> shards;
  std::size_t offset = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const std::size_t size = count / n + (s < count % n ? 1 : 0);
    shards.push_back({static_cast<int>(s), offset, size});
    offset += size;
  }
  return shards;
}

cluster::ClusterSpec ps_cluster(const std::vector<cluster::Address>& workers,
                                const std::vector<cluster::Address>& servers) {
  cluster::ClusterSpec spec;
  for (std::size_t r = 0; r < workers.size(); ++r)
    spec.add({cluster::TaskType::worker, static_cast<int>(r)}, workers[r]);
  for (std::size_t s = 0; s < servers.size(); ++s)
    spec.add({cluster::TaskType::ps, static_cast<int>(s)}, servers[s]);
  return spec;
}

std::optional<std::chrono::nanoseconds> process_cpu_time(long pid) {
  clockid_t clock{};
  timespec now{};
  if (::clock_getcpuclockid(static_cast<pid_t>(pid), &clock) != 0 ||
      ::clock_gettime(clock, &now) != 0)
    return std::nullopt;
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

RankInfo describe_server(int index, long pid, const cluster::Address& address) {
  char host[65] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '?';
  std::vector<int> cpus;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (pid > 0 && ::sched_getaffinity(static_cast<pid_t>(pid), sizeof mask, &mask) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  RankInfo info;
  info.pid = pid;
  info.host = host;
  info.where = fmt::format("ps task {} tcp {} (a process), {}", index, address.to_string(),
                           cpus.empty() ? std::string("CPUs unknown") : describe_cpus(cpus));
  return info;
}

int serve_ps_task(const Options& options, const PsEnvironment& ps) {
  const int index = ps.index.value_or(0);
  ps::Server server(ps_cluster(ps.workers, ps.servers), index);
  const ps::ServerReport report = server.serve();
  const double cpu_s = std::chrono::duration<double>(report.cpu_time).count();
  const auto moved = report.bytes_in + report.bytes_out + report.region_bytes;
  // Where the table goes (Reporter): stdout, or stderr when CSV or JSON take stdout.
  std::FILE* out = options.csv == "-" || options.json == "-" ? stderr : stdout;
  write_flushed(out, fmt::format("# PS   {:>2} served {} requests, {} B in, {} B out, {} B through "
                                 "shared memory; CPU {:.3f} s, {:.3f} ns per byte in or out "
                                 "(ps::ServerReport, whole run)\n",
                                 index, report.requests, report.bytes_in, report.bytes_out,
                                 report.region_bytes, cpu_s,
                                 moved > 0 ? cpu_s * 1e9 / static_cast<double>(moved) : 0.0));
  return 0;
}

namespace {

std::string optional_number(const std::optional<double>& value, int width, int precision) {
  if (!value) return fmt::format("{:>{}}", "-", width);
  // Fewer decimals as the number grows, so that it keeps to its width.
  int digits = precision;
  for (double limit = 100; digits > 0 && *value >= limit; limit *= 10)
    --digits;
  return fmt::format("{:>{}.{}f}", *value, width, digits);
}

}  // namespace

std::string format_ps_footer(const std::vector<PsPoint>& points,
                             const std::optional<PsPingPong>& ping_pong, int workers, int servers,
                             const std::string& congestion) {
  std::string text;
  auto out = std::back_inserter(text);
  fmt::format_to(
      out,
      "#\n# push_pull ({} worker{}, {} ps) against plain TCP between the same CPUs, out of place\n"
      "#   time (the table's too): the slowest worker's median call\n"
      "#   busbw: 2 · size · max(1, workers/servers) / time, the bytes through the busiest end "
      "(push and pull)\n"
      "#   stream: size bytes one way, then a 1-byte answer, both ends polling, under {} (the "
      "kernel's default) and reno (what the ps connections run within a host); ceiling: size / "
      "the faster\n"
      "#   srv CPU: the servers' CPU time during the timed calls, per call and per byte received "
      "or sent (their process CPU clocks: exact for servers that sleep between requests; the "
      "kernel updates a server that never sleeps at scheduler ticks)\n"
      "# {:>12} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8} {:>9} {:>8}\n"
      "# {:>12} {:>10} {:>10} {:>10} {:>9} {:>9} {:>8} {:>9} {:>8}\n",
      workers, workers == 1 ? "" : "s", servers, congestion, "size", "push_pull", "stream",
      "stream", "busbw", "ceiling", "busbw /", "srv CPU", "srv CPU", "(B)", "(us)",
      fmt::format("{} (us)", congestion), "reno (us)", "(GB/s)", "(GB/s)", "ceiling", "(us/call)",
      "(ns/B)");
  std::vector<std::pair<std::size_t, double>> large_shares;
  for (const PsPoint& p : points) {
    std::optional<double> kernel_us;
    std::optional<double> reno_us;
    std::optional<double> ceiling;
    std::optional<double> share;
    if (p.stream && p.stream->best_us() > 0) {
      kernel_us = p.stream->kernel_us;
      reno_us = p.stream->reno_us;
      ceiling = static_cast<double>(p.bytes) / 1e3 / p.stream->best_us();
      share = 100.0 * p.busbw_gbps / *ceiling;
      if (p.bytes >= kPsStreamFromBytes) large_shares.emplace_back(p.bytes, *share / 100.0);
    }
    fmt::format_to(out, "# {:>12} {:>10.2f} {} {} {:>9.3f} {} {}{} {} {}\n", p.bytes, p.time_us,
                   optional_number(kernel_us, 10, 2), optional_number(reno_us, 10, 2), p.busbw_gbps,
                   optional_number(ceiling, 9, 3), optional_number(share, 7, 1), share ? "%" : " ",
                   optional_number(p.server_us_per_call, 9, 2),
                   optional_number(p.server_ns_per_byte, 8, 3));
  }
  if (ping_pong && !points.empty()) {
    const PsPoint& first = points.front();
    const double ratio = first.time_us / ping_pong->polling_us;
    fmt::format_to(
        out,
        "# {} B: push_pull {:.2f} us; TCP ping-pong of {} B {:.2f} us polling, {:.2f} us "
        "sleeping in recv: push_pull = {:.2f}× the polling round trip (target <= {:.0f}×: {})\n",
        first.bytes, first.time_us, ping_pong->bytes, ping_pong->polling_us, ping_pong->sleeping_us,
        ratio, kPsRoundTripTarget, ratio <= kPsRoundTripTarget ? "met" : "not met");
  }
  if (!large_shares.empty()) {
    std::string shares;
    bool all = true;
    for (const auto& [bytes, share] : large_shares) {
      shares +=
          fmt::format("{}{} {:.0f}%", shares.empty() ? "" : ", ", format_size(bytes), 100 * share);
      all = all && share >= kPsStreamShareTarget;
    }
    fmt::format_to(out,
                   "# from {}: busbw = {} of the one-direction TCP ceiling (target for 1 worker "
                   "+ 1 ps: >= {:.0f}%{})\n",
                   format_size(kPsStreamFromBytes), shares, 100 * kPsStreamShareTarget,
                   workers == 1 && servers == 1 ? (all ? ": met" : ": not met") : "");
  }
  return text;
}

}  // namespace strata::perf
