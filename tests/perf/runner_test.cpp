// Tests for benchmarks/perf/measured_rows.hpp's data check (MeasuredRows): on a one-rank
// communicator that can be told to misbehave, a right all-reduce counts no wrong value, and each
// wrong element, each element left unwritten and each write past the output counts once, out of
// place and in place, at every point of a sweep whose buffers are sized for its largest point.
//
// The headers live with the benchmark, in strata_perf_core, which these tests link.
#include <perf/measured_rows.hpp>
#include <perf/peers/peer_rank.hpp>
#include <perf/sweep.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::ReduceOp;
using strata::perf::MeasuredRows;
using strata::perf::Options;
using strata::perf::Row;
using strata::perf::sweep_points;

enum class Fault { none, wrong_first, leave_output, write_past_end };

// One rank: the all-reduce of one input is the input (sum), unless `fault` says otherwise.
class OneRank : public strata::perf::peers::AllReduceOnly {
 public:
  Fault fault = Fault::none;

  int rank() const { return 0; }
  int size() const { return 1; }
  void barrier() {}

  template <class T>
  void all_reduce(std::span<T> data, ReduceOp) {
    damage(data);
  }
  template <class T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp) {
    if (fault != Fault::leave_output) std::copy(send.begin(), send.end(), recv.begin());
    damage(recv);
  }
  // MeasuredRows names every collective; the other collectives are the peers' refusal.
  using AllReduceOnly::all_gather;
  template <class T>
  void all_gather(std::span<const T>, std::span<T>) {
    strata::perf::peers::unsupported_collective("all_gather");
  }

 private:
  template <class T>
  void damage(std::span<T> data) {
    // The runner's own bookkeeping all-reduces (times, wrong counts) go through here too: only
    // the measured float buffers are damaged.
    if constexpr (std::is_same_v<T, float>) {
      if (fault == Fault::wrong_first && !data.empty()) data[0] += 1000.0F;
      // Within the runner's allocation (its guard), one element past what the call may write.
      if (fault == Fault::write_past_end) data.data()[data.size()] = 0.0F;
    }
  }
};

// Every row of an all_reduce sweep of 4 B to 4 KiB, checked, with `fault`.
std::vector<Row> sweep_with(Fault fault) {
  Options options;
  options.min_bytes = 4;
  options.max_bytes = 4096;
  options.step_factor = 4;
  options.warmup_iters = 1;
  options.iters = 1;
  OneRank comm;
  comm.fault = fault;
  const auto points = sweep_points(options, sizeof(float), comm.size());
  MeasuredRows<OneRank, float> measured(comm, options, points, nullptr);
  std::vector<Row> rows;
  for (const auto& point : points)
    rows.push_back(measured(point));
  return rows;
}

TEST_CASE("the data check counts each wrong, unwritten or overrun element once, at every point") {
  constexpr std::int64_t kWholeOutput = -1;  // as many wrong as the point has elements
  struct Expected {
    Fault fault;
    const char* name;
    std::int64_t out_of_place_wrong;
    std::int64_t in_place_wrong;
  };
  for (const Expected& e : {Expected{Fault::none, "none", 0, 0},
                            Expected{Fault::wrong_first, "wrong first element", 1, 1},
                            Expected{Fault::leave_output, "output left alone", kWholeOutput, 0},
                            Expected{Fault::write_past_end, "write past the end", 1, 1}}) {
    CAPTURE(e.name);
    const auto rows = sweep_with(e.fault);
    REQUIRE(rows.size() == 6);  // 4, 16, 64, 256, 1K, 4K
    for (const Row& row : rows) {
      CAPTURE(row.bytes);
      REQUIRE(row.out_of_place.wrong.has_value());
      REQUIRE(row.in_place.wrong.has_value());
      const std::int64_t out_of_place = e.out_of_place_wrong == kWholeOutput
                                            ? static_cast<std::int64_t>(row.count)
                                            : e.out_of_place_wrong;
      CHECK(*row.out_of_place.wrong == out_of_place);
      CHECK(*row.in_place.wrong == e.in_place_wrong);
      CHECK(row.out_of_place.ranks_wrong == (out_of_place > 0 ? 1 : 0));
    }
  }
}

}  // namespace
