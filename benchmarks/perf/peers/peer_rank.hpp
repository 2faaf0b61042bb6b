// benchmarks/perf/peers/peer_rank.hpp — what every rank of a peer runs: strata-perf's own
// measurement (measured_rows.hpp's MeasuredRows) over an adapter that makes the peer library look
// like a strata communicator, so that sizes, warm-up, timing and the data check are the same code.
//
// The adapter (GlooComm, MpiComm) provides what MeasuredRows and gather_rank_info call:
// rank(), size(), barrier(), all_reduce(data, op), all_reduce(send, recv, op),
// all_gather(send, recv), and broadcast/reduce/reduce_scatter that throw (peers measure
// all_reduce only; peer_options.hpp rejects the others before any rank starts). The all-reduces
// that MeasuredRows makes for its own bookkeeping (the slowest rank's time, the wrong counts)
// go through the peer too.
//
// Timing, as in measured_rows.hpp: per size and placement, WARMUP untimed calls, a barrier, ITERS
// calls on a steady clock; the row's time is the mean over that loop, the slowest rank's (an
// all-reduce max over ranks, nccl-tests' `-a 3`; its default `-a 1` averages over ranks). The
// check then refills the inputs for a new seed, poisons the output, makes one more call and
// counts the elements that differ from check.hpp's reference; counts are summed over ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <perf/measured_rows.hpp>
#include <perf/options.hpp>
#include <perf/peers/peer_report.hpp>
#include <perf/run_info.hpp>
#include <perf/runner.hpp>
#include <perf/sweep.hpp>

#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf::peers {

/// True for the element types a peer measures (not half, not bfloat16).
template <class T>
inline constexpr bool kPeerElement = Element<T> && !is_half_precision_v<T>;

/// Turns a sum over `ranks` into strata's mean in place: floating point divides, integers
/// divide the (wrapped) sum with truncation toward zero (ReduceOp::mean's definition, and
/// check.hpp's reference).
template <class T>
void divide_for_mean(std::span<T> data, int ranks) noexcept {
  if constexpr (std::is_integral_v<T>) {
    for (T& x : data)
      x = static_cast<T>(static_cast<std::int64_t>(x) / ranks);
  } else {
    const T n = static_cast<T>(ranks);
    for (T& x : data)
      x /= n;
  }
}

/// Thrown by an adapter's collectives that a peer does not measure.
/// @throws std::logic_error naming the collective.
[[noreturn]] void unsupported_collective(std::string_view name);

/// The collectives MeasuredRows can name but no peer measures: an adapter derives from this
/// (and brings its own all_gather(send, recv) in with `using`).
class AllReduceOnly {
 public:
  template <class T>
  void all_gather(std::span<T>) {
    unsupported_collective("all_gather");
  }
  template <class... Args>
  void broadcast(Args&&...) {
    unsupported_collective("broadcast");
  }
  template <class... Args>
  void reduce(Args&&...) {
    unsupported_collective("reduce");
  }
  template <class... Args>
  void reduce_scatter(Args&&...) {
    unsupported_collective("reduce_scatter");
  }
};

/// One block of rows: gathers the rank lines, runs the measured sweep of all_reduce for
/// `options.type` on `comm`, and reports on rank 0 (`reporter` non-null there only) under the
/// name `algorithm`. Returns 0 when every value was right, 1 otherwise (the same on every rank).
template <class Comm>
int run_peer_rank(Comm& comm, const Options& options, std::string_view algorithm,
                  std::string_view where, PeerReporter* reporter) {
  check_against_group(options, comm.size());
  RunInfo info{options, comm.size(), std::string(algorithm), gather_rank_info(comm, where)};
  if (reporter != nullptr) reporter->begin(info);
  const Summary summary = visit_data_type(options.type, [&](auto tag) -> Summary {
    using T = typename decltype(tag)::type;
    if constexpr (kPeerElement<T>) {
      const auto points = sweep_points(options, sizeof(T), comm.size());
      MeasuredRows<Comm, T> measured(comm, options, points,
                                     reporter != nullptr ? &reporter->progress() : nullptr);
      return run_sweep(points, std::ref(measured), reporter);
    } else {
      throw CommandLineError(
          fmt::format("-d {} is not measured by the peers", to_string(options.type)));
    }
  });
  return summary.out_of_bounds == 0 ? 0 : 1;
}

}  // namespace strata::perf::peers
