// benchmarks/perf/ps_report.hpp — what --transport ps needs besides its row producer
// (ps_rows.hpp): the bus bandwidth of a push_pull, the split of a variable over the servers,
// the cluster of the run, a parameter server's process (its role, its CPU clock, its header
// line), and the footer that puts push_pull next to its peers, a plain TCP stream and
// ping-pong measured in the same run on the same CPUs.
//
// busbw of push_pull. Each iteration a worker pushes S bytes and pulls S bytes back, one after
// the other on each connection; a server takes W/P of the workers' pushes and pulls. The busiest
// endpoint therefore moves 2·S·max(1, W/P) bytes per iteration (a worker's when W <= P, a
// server's otherwise), and busbw = algbw · 2·max(1, W/P) is what it moves per second, push and
// pull together. With 1 worker and 1 server, busbw = 2·S / t: the bytes that crossed the one
// connection, comparable with what one TCP connection carries in one direction (the stream
// peer), since push and pull do not overlap.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <perf/launch.hpp>
#include <perf/options.hpp>
#include <perf/run_info.hpp>

#include <strata/cluster/cluster_spec.hpp>

namespace strata::perf {

/// busbw / algbw of a push_pull with `workers` workers and `servers` servers (file comment).
constexpr double ps_bus_bandwidth_factor(int workers, int servers) noexcept {
  const double per_server = static_cast<double>(workers) / static_cast<double>(servers);
  return 2.0 * (per_server > 1.0 ? per_server : 1.0);
}

/// One shard of the measured variable: elements [offset, offset + size), on server `server`.
struct PsShard {
  int server = 0;
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// `count` elements over `servers` servers, one shard each, as TF splits rows (the first
/// count % servers shards one element larger); a variable of fewer elements than servers has
/// one shard per element, on the first servers. Never an empty shard.
std::vector<PsShard> split_over_servers(std::size_t count, int servers);

/// The cluster of a run: `workers` as its worker tasks (in rank order), `servers` as its ps
/// tasks.
cluster::ClusterSpec ps_cluster(const std::vector<cluster::Address>& workers,
                                const std::vector<cluster::Address>& servers);

/// The CPU time process `pid` has used so far, all its threads (clock_getcpuclockid); nothing
/// when it cannot be read. Exact for a process that sleeps between requests; for one that runs
/// without sleeping, the kernel adds the current slice at scheduler ticks only.
std::optional<std::chrono::nanoseconds> process_cpu_time(long pid);

/// The header line of parameter server `index` (process `pid`, listening on `address`): where it
/// listens and the CPUs it may use.
RankInfo describe_server(int index, long pid, const cluster::Address& address);

/// A parameter server started by strata-perf's supervisor (launch.hpp): serves the workers until
/// every one has finished, then prints what it did (ps::ServerReport) where the table goes.
/// Returns the exit status (0).
/// @throws what ps::Server throws.
int serve_ps_task(const Options& options, const PsEnvironment& ps);

/// The stream peer at one size: the median time of a message (microseconds) under the kernel's
/// default TCP congestion control and under reno (what strata's collectives run within a host).
struct PsStream {
  double kernel_us = 0;
  double reno_us = 0;
  /// The one-direction ceiling: the faster of the two.
  double best_us() const noexcept { return kernel_us < reno_us ? kernel_us : reno_us; }
};

/// One size of a push_pull sweep, for the footer.
struct PsPoint {
  std::size_t bytes = 0;
  double time_us = 0;     ///< out of place: the slowest worker's median
  double busbw_gbps = 0;  ///< out of place
  /// The servers' CPU time during the timed out-of-place calls, per call and per byte they
  /// received or sent (2 · size per call); nothing when not measured.
  std::optional<double> server_us_per_call{};
  std::optional<double> server_ns_per_byte{};
  std::optional<PsStream> stream{};
};

/// The ping-pong peer: the median round trip of `bytes` each way, polling and sleeping.
struct PsPingPong {
  std::size_t bytes = 0;
  double polling_us = 0;
  double sleeping_us = 0;
};

/// The targets, as the footer states them.
inline constexpr double kPsStreamShareTarget = 0.70;  ///< 1 worker + 1 ps, 16 MiB and up
inline constexpr double kPsRoundTripTarget = 2.0;     ///< 4 B: push_pull / polling round trip
inline constexpr std::size_t kPsStreamFromBytes = std::size_t{16} << 20;
/// The ping-pong peer runs when the sweep starts at this size or below (its latency line).
inline constexpr std::size_t kPsPingPongMaxBytes = 4096;

/// The footer: per size push_pull's time and busbw next to the stream peer's, their ratio and
/// the servers' CPU; then the smallest size against the ping-pong, and the busbw share of the
/// stream from 16 MiB, each with its target. `congestion`: the kernel's default congestion
/// control, which the stream's first column runs (its second runs reno, as the ps connections
/// do within a host).
std::string format_ps_footer(const std::vector<PsPoint>& points,
                             const std::optional<PsPingPong>& ping_pong, int workers, int servers,
                             const std::string& congestion);

}  // namespace strata::perf
