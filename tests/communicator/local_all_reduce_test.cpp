// Conformance of LocalCommunicator's all_reduce, with both algorithms (AllReduceScatterGather,
// AllReduceReduceToOne), against the one collective reference (tools/reference/), in the
// spirit of nccl-tests' data checks: every ReduceOp × every element type × world sizes 1..8 ×
// counts × in place and out of place. Every rank's output is checked (within the tolerances
// stated in collective_reference/reference.hpp, and bit-identical across ranks), out-of-place
// inputs must be unchanged, and guard bytes around every buffer must survive.
//
// The sweep, chosen by STRATA_TEST_SWEEP:
//   (unset) / standard  counts {0, 1, 7, 1023}: the full product. Counts 2^20+3 and 16 Mi: every
//                       (op, type) once per count, world size rotating over 1..8 (the two
//                       algorithms offset by 4, so each meets other sizes) and in/out of place
//                       alternating; plus world size 8, float, sum at each count.
//   quick               as standard, but the largest count is 2^20+3 (sanitizer presets).
//   full                the complete product at all six counts (minutes: see the README's
//                       test section; not for CI).
// The other collectives are in local_test.cpp; failures, async calls and determinism across the
// two algorithms in local_failure_test.cpp.
#include <strata/communicator/local.hpp>

#include <string>
#include <type_traits>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "conformance_runner.hpp"
#include "sweep_plan.hpp"
#include "sweep_report.hpp"

namespace {

using strata::algorithms::AllReduceReduceToOne;
using strata::algorithms::AllReduceScatterGather;
using strata::communicator::Collective;
using strata::communicator::LocalCommunicator;
namespace testing = strata::testing;

template <class Algorithm>
testing::ConformanceRunner<LocalCommunicator<Algorithm>> make_runner() {
  return testing::ConformanceRunner<LocalCommunicator<Algorithm>>(
      fmt::format("local<{}>", Algorithm::kName));
}

using strata::testing::report;

}  // namespace

TEST_CASE_TEMPLATE(
    "all_reduce matches the reference for every op, type and world size 1-8 at counts 0, 1, 7 "
    "and 1023, in and out of place",
    Algorithm, AllReduceScatterGather, AllReduceReduceToOne) {
  auto runner = make_runner<Algorithm>();
  report(testing::run_cases(runner, testing::small_count_cases(Collective::all_reduce)));
}

TEST_CASE_TEMPLATE("all_reduce matches the reference at 2^20+3 and 16 Mi elements", Algorithm,
                   AllReduceScatterGather, AllReduceReduceToOne) {
  auto runner = make_runner<Algorithm>();
  const int rotation = std::is_same_v<Algorithm, AllReduceScatterGather> ? 0 : 4;
  report(testing::run_cases(
      runner, testing::large_count_cases(Collective::all_reduce, testing::sweep_from_environment(),
                                         rotation)));
}
