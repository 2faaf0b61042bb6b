// Tests for strata/communicator/tcp.hpp: group formation on loopback and the conformance of
// every collective against the independent reference of collective_reference.hpp, for world
// sizes 1 to 4 (each rank a thread with its own TCP connections).
//
// Sweep: every element type × world sizes 1..4 × in and out of place × every ReduceOp (for
// reducing collectives) × roots, at counts {0, 1, 7, 1023}, with every all-reduce algorithm
// (automatic, ring, recursive doubling), and again with 64-byte messages over two connections
// per peer, so that buffers are cut into many segments; at 2^20+3 and 16 Mi elements every
// (collective, op, type) once, world sizes rotating. 16-bit floats are checked with one
// rounding per ring step (Rounding::every_step). Failures and mismatches are in
// tcp_failure_test.cpp; runs across processes in tcp_process_test.cpp.
#include <strata/communicator/tcp.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/communicator/communicator.hpp>

#include "collective_reference.hpp"

namespace {

using strata::communicator::Collective;
using strata::communicator::CommunicatorOptions;
using strata::communicator::TcpAllReduce;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpOptions;
namespace testing = strata::testing;

// A group of TcpCommunicators with fixed TCP options, named for messages.
struct Tuning {
  std::string name;
  TcpOptions tcp;
};

Tuning tuned(std::string name, TcpAllReduce algorithm, std::size_t chunk, int connections) {
  TcpOptions tcp;
  tcp.all_reduce = algorithm;
  tcp.chunk_bytes = chunk;
  tcp.connections_per_peer = connections;
  return {std::move(name), tcp};
}

const Tuning kDefault = tuned("tcp", TcpAllReduce::automatic, std::size_t{1} << 20, 1);
const Tuning kRing = tuned("tcp<ring>", TcpAllReduce::ring, std::size_t{1} << 20, 1);
const Tuning kRecursiveDoubling =
    tuned("tcp<rd>", TcpAllReduce::recursive_doubling, std::size_t{1} << 20, 1);
// 64-byte messages over two connections per peer: a 1023-element float vector becomes dozens
// of segments, exercising pipelining, receive slots and the order of channels.
const Tuning kSegmented = tuned("tcp<64 B x2>", TcpAllReduce::automatic, 64, 2);
const Tuning kSegmentedRing = tuned("tcp<ring, 64 B x2>", TcpAllReduce::ring, 64, 2);
const Tuning kSegmentedRecursiveDoubling =
    tuned("tcp<rd, 64 B x2>", TcpAllReduce::recursive_doubling, 64, 2);

testing::ConformanceRunner<TcpCommunicator> runner_for(const Tuning& tuning) {
  return testing::ConformanceRunner<TcpCommunicator>(
      tuning.name, {}, testing::Rounding::every_step,
      [tcp = tuning.tcp](int size, const CommunicatorOptions& options) {
        return TcpCommunicator::create(size, options, tcp);
      });
}

std::vector<testing::CaseSpec> up_to_four_ranks(std::vector<testing::CaseSpec> cases) {
  std::erase_if(cases, [](const testing::CaseSpec& c) { return c.size > 4; });
  return cases;
}

void report(const testing::SweepSummary& summary) {
  for (const std::string& message : summary.messages)
    FAIL_CHECK(message);
  CHECK_MESSAGE(summary.failed == 0, fmt::format("{} of {} cases failed, {} wrong elements in all",
                                                 summary.failed, summary.cases, summary.wrong));
  CHECK(summary.cases > 0);
}

void sweep_small(const Tuning& tuning, Collective kind) {
  auto runner = runner_for(tuning);
  report(testing::run_cases(
      runner, testing::thinned_when_quick(up_to_four_ranks(testing::small_count_cases(kind)))));
}

}  // namespace

TEST_CASE("a loopback group forms and every rank knows its rank and size") {
  static_assert(strata::communicator::Communicator<TcpCommunicator>);
  auto group = TcpCommunicator::create(3);
  REQUIRE(group.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(group[static_cast<std::size_t>(r)].rank() == r);
    CHECK(group[static_cast<std::size_t>(r)].size() == 3);
  }
  CHECK(TcpCommunicator::kName == "tcp");
}

TEST_CASE("all_reduce matches the reference at small counts, world sizes 1-4") {
  for (const Tuning* tuning : {&kDefault, &kRing, &kRecursiveDoubling, &kSegmented, &kSegmentedRing,
                               &kSegmentedRecursiveDoubling}) {
    CAPTURE(tuning->name);
    sweep_small(*tuning, Collective::all_reduce);
  }
}

TEST_CASE(
    "broadcast, reduce, all_gather and reduce_scatter match the reference at "
    "small counts, world sizes 1-4") {
  for (const Tuning* tuning : {&kDefault, &kSegmented}) {
    CAPTURE(tuning->name);
    for (Collective kind : {Collective::broadcast, Collective::reduce, Collective::all_gather,
                            Collective::reduce_scatter}) {
      CAPTURE(kind);
      sweep_small(*tuning, kind);
    }
  }
}

TEST_CASE("collectives match the reference at 2^20+3 and 16 Mi elements") {
  auto runner = runner_for(kDefault);
  for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce,
                          Collective::all_gather, Collective::reduce_scatter}) {
    CAPTURE(kind);
    report(testing::run_cases(runner, up_to_four_ranks(testing::large_count_cases(
                                          kind, testing::sweep_from_environment()))));
  }
}

TEST_CASE("barrier returns on every rank of groups of 1 to 5") {
  for (int size = 1; size <= 5; ++size) {
    CAPTURE(size);
    auto group = TcpCommunicator::create(size);
    std::atomic<int> done{0};
    {
      std::vector<std::jthread> threads;
      for (int r = 1; r < size; ++r)
        threads.emplace_back([&, r] {
          for (int i = 0; i < 10; ++i)
            group[static_cast<std::size_t>(r)].barrier();
          ++done;
        });
      for (int i = 0; i < 10; ++i)
        group[0].barrier();
    }
    CHECK(done == size - 1);
  }
}
