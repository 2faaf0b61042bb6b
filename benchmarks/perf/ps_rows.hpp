// benchmarks/perf/ps_rows.hpp — --transport ps's row producer: push_pull of one variable per
// size, split over the parameter servers, timed and checked on every worker (the ranks of a
// communicator the workers coordinate through), and what a worker runs around it.
//
// Per size, every worker creates (or finds) the variable "perf/<size>B" with one shard per
// server (split_over_servers), under UpdateRule::sum: a server adds each push to the values
// (BytePS's summation service), so every value pulled back can be checked. Then per placement
// (out of place: the values come back into a buffer of their own; in place: into the gradient's):
//   1. every worker makes WARMUP untimed push_pulls, meets the others at a barrier, and times
//      ITERS push_pulls, each on its own (Client::call of one ShardCall per server, one lane);
//      the row's time is the slowest worker's median, algbw = size / time, and busbw =
//      algbw · ps_bus_bandwidth_factor (ps_report.hpp);
//   2. with the check on: worker 0 assigns the variable a base B, then the workers push_pull in
//      turn, worker w a gradient G_w, into a poisoned output with a guard after it; what worker
//      w pulls must be B + G_0 + ... + G_w, within the collective reference's tolerance for a
//      sum (B and G_w are the reference's inputs of ranks W and w, a seed per check), and the
//      guard must be untouched. Wrong elements are summed over the workers, as MeasuredRows does.
// Rank 0 also reads the servers' CPU clocks around the timed out-of-place calls and measures
// the stream peer at each size, when its PsProbe can (strata_perf_ps.cpp; the tests run
// without).
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <perf/ceiling_report.hpp>
#include <perf/check.hpp>
#include <perf/nccl_format.hpp>
#include <perf/options.hpp>
#include <perf/output.hpp>
#include <perf/ps_report.hpp>
#include <perf/report.hpp>
#include <perf/run_info.hpp>
#include <perf/runner.hpp>
#include <perf/sweep.hpp>

#include <strata/communicator/options.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/protocol.hpp>

namespace strata::perf {

/// What rank 0 measures besides push_pull, where it can: every member may be empty.
struct PsProbe {
  /// The CPU time every server has used so far, together.
  std::function<std::optional<std::chrono::nanoseconds>()> server_cpu{};
  /// The stream peer at the given size.
  std::function<std::optional<PsStream>(std::size_t bytes)> stream{};
  /// The ping-pong peer, for messages of the given size.
  std::function<std::optional<PsPingPong>(std::size_t bytes)> ping_pong{};
};

/// The prefix of a push under UpdateRule::sum: no optimizer (the server adds the values),
/// applied at once (SyncSpec's asynchronous mode, as ParameterServerStrategy's default).
inline std::vector<std::byte> sum_push_prefix() {
  const auto prefix = ps::push_prefix(ps::OptimizerSpec{});
  return {prefix.begin(), prefix.end()};
}

/// Times and checks push_pull of elements of type T on every point of a sweep. `ClientType` is
/// ps::Client, or what has its num_servers, create and call (the tests' faulty client).
template <class Comm, std::floating_point T, class ClientType = ps::Client>
class PsRows {
 public:
  /// `comm` coordinates the workers (its ranks); `client` connects this worker to every
  /// server. `probe` and `progress` are rank 0's (may be empty or null).
  PsRows(Comm& comm, ClientType& client, const Options& options,
         const std::vector<SweepPoint>& points, PsProbe probe, Progress* progress)
      : comm_(comm),
        client_(client),
        options_(options),
        probe_(std::move(probe)),
        progress_(progress),
        points_(points.size()),
        prefix_(sum_push_prefix()) {
    std::size_t count = 0;
    for (const auto& point : points)
      count = std::max(count, point.sizes.send_count);
    gradient_.resize(count + kGuard);
    result_.resize(count + kGuard);
  }

  Row operator()(const SweepPoint& point) {
    const Variable variable = create(point);
    Row row;
    row.bytes = point.sizes.bytes;
    row.count = point.sizes.param_count;
    row.type = std::string(to_string(data_type_of<T>));
    row.redop = "sum";
    row.root = -1;
    PsPoint extra;
    extra.bytes = point.sizes.bytes;
    row.out_of_place = measure(point, variable, /*in_place=*/false, &extra);
    row.in_place = measure(point, variable, /*in_place=*/true, nullptr);
    extra.time_us = row.out_of_place.time_us;
    extra.busbw_gbps = row.out_of_place.busbw_gbps;
    if (probe_.stream && point.sizes.bytes > 0) {
      show(point, "stream peer");
      extra.stream = probe_.stream(point.sizes.bytes);
    }
    measured_.push_back(extra);
    // The other workers wait here while worker 0 measures the stream peer: their next pushes
    // would share its CPUs.
    comm_.barrier();
    return row;
  }

  /// Every point measured so far, for the footer.
  const std::vector<PsPoint>& measured() const noexcept { return measured_; }

 private:
  struct Variable {
    std::vector<PsShard> shards;
    std::vector<std::uint32_t> handles;
  };

  // Every worker creates the point's variable, or finds it created by another.
  Variable create(const SweepPoint& point) {
    Variable variable;
    variable.shards = split_over_servers(point.sizes.send_count, client_.num_servers());
    for (const PsShard& shard : variable.shards) {
      const auto initial = std::as_bytes(std::span(gradient_).subspan(shard.offset, shard.size));
      const auto current =
          std::as_writable_bytes(std::span(result_).subspan(shard.offset, shard.size));
      const std::string name =
          variable.shards.size() == 1
              ? fmt::format("perf/{}B", point.sizes.bytes)
              : fmt::format("perf/{}B/part_{}", point.sizes.bytes, shard.server);
      variable.handles.push_back(
          client_.create(shard.server, name, data_type_of<T>, ps::UpdateRule::sum, initial, current)
              .handle);
    }
    return variable;
  }

  // One push_pull of `gradient_` per shard, the values coming back into `out`.
  std::vector<ps::ShardCall> calls(const Variable& variable, ps::Operation operation,
                                   std::span<const T> values, std::span<T> out) const {
    std::vector<ps::ShardCall> list(variable.shards.size());
    for (std::size_t s = 0; s < list.size(); ++s) {
      const PsShard& shard = variable.shards[s];
      ps::ShardCall& call = list[s];
      call.server = shard.server;
      call.handle = variable.handles[s];
      call.operation = operation;
      call.type = data_type_of<T>;
      call.count = shard.size;
      if (operation == ps::Operation::push_pull) call.prefix = prefix_;
      call.values = std::as_bytes(values.subspan(shard.offset, shard.size));
      if (operation != ps::Operation::assign)
        call.result = std::as_writable_bytes(out.subspan(shard.offset, shard.size));
    }
    return list;
  }

  Measurement measure(const SweepPoint& point, const Variable& variable, bool in_place,
                      PsPoint* extra) {
    const int workers = comm_.size();
    const int rank = comm_.rank();
    const std::size_t count = point.sizes.send_count;
    const std::span<T> gradient(gradient_.data(), count);
    const std::span<T> out(in_place ? gradient_.data() : result_.data(), count);
    show(point, in_place ? "in-place timing" : "out-of-place timing");

    // Timing runs on valid inputs; the workers' gradients differ (ranks 0..W-1 of W+1).
    const std::uint64_t timing_seed = 2 * (2 * point.index + (in_place ? 1 : 0));
    const DataCheck<T> timing(timing_seed, ReduceOp::sum, workers + 1);
    for (std::size_t i = 0; i < count; ++i)
      gradient[i] = timing.input(rank, i);
    auto timed = calls(variable, ps::Operation::push_pull, gradient, out);
    for (int i = 0; i < options_.warmup_iters; ++i)
      client_.call(0, timed);
    comm_.barrier();
    const auto cpu_before = server_cpu();
    std::vector<double> seconds(static_cast<std::size_t>(options_.iters));
    for (auto& s : seconds) {
      const auto start = std::chrono::steady_clock::now();
      client_.call(0, timed);
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::nth_element(seconds.begin(),
                     seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2),
                     seconds.end());
    double median = seconds[seconds.size() / 2];
    comm_.all_reduce(std::span<double>(&median, 1), ReduceOp::max);
    const auto cpu_after = server_cpu();
    if (extra != nullptr && cpu_before && cpu_after) {
      const auto cpu_ns = static_cast<double>((*cpu_after - *cpu_before).count());
      const double calls = static_cast<double>(workers) * options_.iters;
      const double moved = 2.0 * static_cast<double>(point.sizes.bytes) * calls;
      extra->server_us_per_call = cpu_ns / 1e3 / calls;
      if (moved > 0) extra->server_ns_per_byte = cpu_ns / moved;
    }

    Measurement m;
    m.time_us = median * 1e6;
    m.algbw_gbps = algorithm_bandwidth_gbps(point.sizes.bytes, median);
    m.busbw_gbps = m.algbw_gbps * ps_bus_bandwidth_factor(workers, client_.num_servers());
    if (!options_.check) return m;

    show(point, in_place ? "in-place checking" : "out-of-place checking");
    const DataCheck<T> check(timing_seed + 1, ReduceOp::sum, workers + 1);
    comm_.barrier();  // every worker's timed calls are done
    if (rank == 0) {
      const std::span<T> base(result_.data(), count);
      for (std::size_t i = 0; i < count; ++i)
        base[i] = check.input(workers, i);
      auto assign = calls(variable, ps::Operation::assign, base, {});
      client_.call(0, assign);
    }
    std::int64_t wrong = 0;
    for (int turn = 0; turn < workers; ++turn) {
      comm_.barrier();  // the variable holds B + G_0 + ... + G_(turn-1)
      if (turn != rank) continue;
      for (std::size_t i = 0; i < count; ++i)
        gradient[i] = check.input(rank, i);
      // Poison what the call must write (out of place) and the guard after it.
      T* const poisoned = in_place ? gradient_.data() + count : result_.data();
      const std::size_t poisoned_elements = in_place ? kGuard : count + kGuard;
      std::memset(static_cast<void*>(poisoned), kPoisonByte, poisoned_elements * sizeof(T));
      auto checked = calls(variable, ps::Operation::push_pull, gradient, out);
      client_.call(0, checked);
      wrong = count_wrong(out, check, rank);
    }
    comm_.barrier();
    std::int64_t totals[2] = {wrong, wrong != 0 ? 1 : 0};
    comm_.all_reduce(std::span<std::int64_t>(totals), ReduceOp::sum);
    m.wrong = totals[0];
    m.ranks_wrong = totals[1];
    return m;
  }

  // Elements of `out` other than B + G_0 + ... + G_rank (the reference's inputs of rank
  // `workers`, then ranks 0..rank), and guard elements after it that the call overwrote.
  std::int64_t count_wrong(std::span<const T> out, const DataCheck<T>& check, int rank) const {
    const int base = check.ranks() - 1;
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto expected = reference::expected_reduction<T>(
          ReduceOp::sum, rank + 2, [&](int r) { return check.input(r == 0 ? base : r - 1, i); });
      wrong += reference::matches(out[i], expected) ? 0 : 1;
    }
    for (std::size_t i = 0; i < kGuard; ++i)
      wrong += DataCheck<T>::untouched(out.data()[out.size() + i]) ? 0 : 1;
    return wrong;
  }

  std::optional<std::chrono::nanoseconds> server_cpu() const {
    if (!probe_.server_cpu) return std::nullopt;
    return probe_.server_cpu();
  }

  void show(const SweepPoint& point, std::string_view what) {
    if (progress_ == nullptr) return;
    progress_->show(fmt::format("[push_pull {} {}/{}] {}", format_size(point.sizes.bytes),
                                point.index + 1, points_, what));
  }

  // Poisoned elements after each output: a write past it counts as wrong.
  static constexpr std::size_t kGuard = 64;

  Comm& comm_;
  ClientType& client_;
  const Options& options_;
  PsProbe probe_;
  Progress* progress_;
  std::size_t points_;
  std::vector<std::byte> prefix_;
  std::vector<T> gradient_;  // with a guard after the largest point
  std::vector<T> result_;
  std::vector<PsPoint> measured_;
};

/// What a worker of --transport ps knows besides its communicator and client.
struct PsRankSetup {
  std::vector<RankInfo> servers;  ///< rank 0: the header lines of the servers
  std::vector<int> group_cpus;    ///< rank 0: where --ceiling measures (none: its own)
  PsProbe probe;                  ///< rank 0: what it measures besides push_pull
};

/// Everything one worker does: gathers the rank lines, measures the ping-pong peer (rank 0),
/// runs the sweep of push_pull, and reports on rank 0 (the table, then the footer against the
/// peers). Returns 0 when every value was right, 1 otherwise (the same on every worker). The
/// caller tells the servers it finished (Client::done) afterwards.
/// @throws strata::Error when a call fails; CommandLineError for a type the servers do not hold.
template <class Comm, class ClientType>
int run_ps_rank(Comm& comm, ClientType& client, const Options& options, std::string_view where,
                Reporter* reporter, PsRankSetup setup) {
  const bool rank0 = comm.rank() == 0;
  // Rank 0 measures before the group's first collective, while the other workers wait in it.
  std::optional<Ceilings> ceilings;
  std::optional<PsPingPong> ping_pong;
  communicator::CallOptions first_call;
  first_call.timeout = kCeilingWait;
  const auto visit = [&](auto&& f) {
    if (options.type == DataType::float64) return f(double{});
    if (options.type == DataType::float32) return f(float{});
    throw CommandLineError(fmt::format("--transport ps: the servers hold float and double, not {}",
                                       to_string(options.type)));
  };
  const std::size_t element_bytes = options.type == DataType::float64 ? 8 : 4;
  const auto points = sweep_points(options, element_bytes, comm.size());
  if (rank0) {
    if (options.ceiling) ceilings = on_cpus(setup.group_cpus, measure_ceilings);
    if (setup.probe.ping_pong && !points.empty() &&
        points.front().sizes.bytes <= kPsPingPongMaxBytes)
      ping_pong = setup.probe.ping_pong(std::max<std::size_t>(points.front().sizes.bytes, 1));
  }
  RunInfo info{options, comm.size(), fmt::format("sum/{}ps", client.num_servers()),
               gather_rank_info(comm, where, first_call), ceilings};
  info.servers = setup.servers;
  if (reporter != nullptr) reporter->begin(info);
  std::vector<PsPoint> measured;
  const Summary summary = visit([&](auto zero) {
    using T = decltype(zero);
    PsRows<Comm, T, ClientType> rows(comm, client, options, points, rank0 ? setup.probe : PsProbe{},
                                     reporter != nullptr ? &reporter->progress() : nullptr);
    const Summary s = run_sweep(points, std::ref(rows), reporter);
    measured = rows.measured();
    return s;
  });
  if (reporter != nullptr) {
    std::FILE* out = options.csv == "-" || options.json == "-" ? stderr : stdout;
    write_flushed(out, format_ps_footer(measured, ping_pong, comm.size(), client.num_servers(),
                                        default_congestion_control()));
  }
  return summary.out_of_bounds == 0 ? 0 : 1;
}

}  // namespace strata::perf
