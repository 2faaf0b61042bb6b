// Tests for strata/communicator/local.hpp: group creation, barrier, and the conformance of
// broadcast, reduce, all_gather and reduce_scatter against the one collective reference
// (tools/reference/; nccl-tests-style data checks, support/conformance_runner.hpp).
//
// Conformance sweep: every element type × world sizes 1..8 × in place and out of place × (for
// reduce and reduce_scatter) every ReduceOp; broadcast tries every root, reduce the first,
// middle and last rank, and out-of-place reduce alternates between non-roots passing an empty
// output and passing one that must stay untouched. all_gather's and reduce_scatter's count is the
// per-rank block (buffers of size · count). Chosen by STRATA_TEST_SWEEP:
//   (unset) / standard  counts {0, 1, 7, 1023}: the full product. Counts 2^20+3 and 16 Mi: every
//                       (collective, op, type) once per count, world size rotating over 1..8,
//                       in/out of place alternating, roots rotating; plus world size 8, float,
//                       sum, per collective and count. At these counts all_gather's and
//                       reduce_scatter's block is count / size, so that 8 ranks of int64 stay
//                       within 2 GiB (a 16 Mi block would need 8 · 8 · 16 Mi · 8 B = 8 GiB).
//   quick               as standard, but the largest count is 2^20+3 (sanitizer presets).
//   full                the complete product at all six counts (slow; not for CI).
// all_reduce is swept in local_all_reduce_test.cpp; failures and async calls are in
// local_failure_test.cpp.
#include <strata/communicator/local.hpp>

#include <atomic>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "conformance_runner.hpp"
#include "rank_team.hpp"
#include "sweep_plan.hpp"
#include "sweep_report.hpp"

namespace {

using strata::communicator::Collective;
using strata::communicator::CommunicatorOptions;
using Local = strata::communicator::LocalCommunicator<>;
namespace testing = strata::testing;

using strata::testing::report;

void sweep_small(Collective kind) {
  testing::ConformanceRunner<Local> runner("local");
  report(testing::run_cases(runner, testing::small_count_cases(kind)));
}

void sweep_large(Collective kind) {
  testing::ConformanceRunner<Local> runner("local");
  report(testing::run_cases(runner,
                            testing::large_count_cases(kind, testing::sweep_from_environment())));
}

}  // namespace

TEST_CASE("LocalCommunicator::create rejects groups of fewer than one rank") {
  for (int size : {0, -1}) {
    CAPTURE(size);
    CHECK_THROWS_AS(Local::create(size), strata::UsageError);
    CHECK_THROWS_WITH(
        Local::create(size),
        doctest::Contains(fmt::format("at least one rank, got size {}", size).c_str()));
  }
}

TEST_CASE("every rank of a local group knows its rank, the group size and the options") {
  const CommunicatorOptions options{.timeout = std::chrono::milliseconds(1234)};
  auto group = Local::create(5, options);
  REQUIRE(group.size() == 5);
  for (int r = 0; r < 5; ++r) {
    CHECK(group[static_cast<std::size_t>(r)].rank() == r);
    CHECK(group[static_cast<std::size_t>(r)].size() == 5);
    CHECK(group[static_cast<std::size_t>(r)].options().timeout == options.timeout);
  }
  CHECK(Local::kName == "local");
}

TEST_CASE("barrier returns on a rank only after every rank has called it") {
  for (int size : {1, 2, 3, 5, 8}) {
    CAPTURE(size);
    testing::RankTeam<Local> team(size);
    std::atomic<int> arrived{0};
    std::atomic<int> early{0};
    constexpr int kRounds = 20;
    team.run_or_throw([&](int rank) {
      for (int round = 1; round <= kRounds; ++round) {
        arrived.fetch_add(1);
        if (rank % 2 == 0) {
          team[rank].barrier();
        } else {
          team[rank].barrier_async().wait();
        }
        // Every rank has incremented for this round before any returns from its barrier.
        if (arrived.load() < size * round) early.fetch_add(1);
      }
    });
    CHECK(early.load() == 0);
    CHECK(arrived.load() == size * kRounds);
  }
}

TEST_CASE(
    "broadcast copies the root's data for every root, type and world size 1-8 at counts "
    "0, 1, 7 and 1023, in and out of place") {
  sweep_small(Collective::broadcast);
}

TEST_CASE(
    "reduce matches the reference at the root and leaves other ranks' outputs untouched, "
    "for every op, type and world size 1-8 at counts 0, 1, 7 and 1023") {
  sweep_small(Collective::reduce);
}

TEST_CASE(
    "all_gather places every rank's block for every type and world size 1-8 at blocks "
    "0, 1, 7 and 1023, in and out of place") {
  sweep_small(Collective::all_gather);
}

TEST_CASE(
    "reduce_scatter matches the reference for every op, type and world size 1-8 at "
    "blocks 0, 1, 7 and 1023, in and out of place") {
  sweep_small(Collective::reduce_scatter);
}

TEST_CASE("broadcast matches the reference at 2^20+3 and 16 Mi elements") {
  sweep_large(Collective::broadcast);
}

TEST_CASE("reduce matches the reference at 2^20+3 and 16 Mi elements") {
  sweep_large(Collective::reduce);
}

TEST_CASE("all_gather matches the reference at 2^20+3 and 16 Mi elements (block count / size)") {
  sweep_large(Collective::all_gather);
}

TEST_CASE(
    "reduce_scatter matches the reference at 2^20+3 and 16 Mi elements (block count / size)") {
  sweep_large(Collective::reduce_scatter);
}
