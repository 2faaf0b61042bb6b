// Tests for strata/communicator/hierarchical.hpp in one process: n "workers" joined by a
// loopback TcpCommunicator group, each with k local replicas (threads), checked as one group
// of k·n ranks against the one collective reference (tools/reference/) — every
// collective, element type, op, root, in and out of place, at counts {0, 1, 7, 1023} for
// k = 2 and world sizes 2, 4, 6, 8, and k = 3 for 3 and 6. Also: workers that disagree on
// k are refused; ranks are numbered worker · k + replica.
#include <strata/communicator/hierarchical.hpp>

#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/communicator/communicator.hpp>

#include "conformance_runner.hpp"
#include "sweep_plan.hpp"
#include "sweep_report.hpp"

namespace {

using strata::communicator::Collective;
using strata::communicator::CommunicatorOptions;
using strata::communicator::HierarchicalCommunicator;
using strata::communicator::TcpCommunicator;
namespace testing = strata::testing;

using Hierarchical = HierarchicalCommunicator<>;

// `size` ranks as size / local workers of `local` replicas, in global rank order.
std::vector<Hierarchical> loopback(int local, int size, const CommunicatorOptions& options = {}) {
  const int workers = size / local;
  auto inter = TcpCommunicator::create(workers, options);
  std::vector<std::vector<Hierarchical>> per_worker(static_cast<std::size_t>(workers));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  {
    std::vector<std::jthread> threads;  // create() agrees on k across workers: concurrently
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        const auto i = static_cast<std::size_t>(w);
        try {
          per_worker[i] = Hierarchical::create(local, std::move(inter[i]), options, w == 0);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
  }
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  std::vector<Hierarchical> ranks;
  for (auto& worker : per_worker)
    for (auto& replica : worker)
      ranks.emplace_back(std::move(replica));
  return ranks;
}

using strata::testing::report;

void sweep(int local, Collective kind) {
  auto cases = testing::small_count_cases(kind);
  std::erase_if(cases, [local](const testing::CaseSpec& c) { return c.size % local != 0; });
  testing::ConformanceRunner<Hierarchical> runner(
      fmt::format("hierarchical<k={}>", local), {},
      [local](int size, const CommunicatorOptions& options) {
        return loopback(local, size, options);
      });
  report(testing::run_cases(runner, testing::thinned_when_quick(cases)));
}

}  // namespace

TEST_CASE("ranks are numbered worker · k + replica, and the chief is worker 0") {
  static_assert(strata::communicator::Communicator<HierarchicalCommunicator<>>);
  auto group = loopback(2, 6);
  REQUIRE(group.size() == 6);
  for (int g = 0; g < 6; ++g) {
    const auto& rank = group[static_cast<std::size_t>(g)];
    CHECK(rank.rank() == g);
    CHECK(rank.size() == 6);
    CHECK(rank.worker_rank() == g / 2);
    CHECK(rank.local_rank() == g % 2);
    CHECK(rank.num_workers() == 3);
    CHECK(rank.is_chief() == (g < 2));
  }
}

TEST_CASE("every collective matches the reference with 2 replicas per worker") {
  for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce,
                          Collective::all_gather, Collective::reduce_scatter}) {
    CAPTURE(kind);
    sweep(2, kind);
  }
}

TEST_CASE("every collective matches the reference with 3 replicas per worker") {
  for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce,
                          Collective::all_gather, Collective::reduce_scatter}) {
    CAPTURE(kind);
    sweep(3, kind);
  }
}

TEST_CASE("workers that run different numbers of local replicas are refused") {
  auto inter = TcpCommunicator::create(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (int w = 0; w < 2; ++w)
      threads.emplace_back([&, w] {
        try {
          HierarchicalCommunicator<>::create(
              w == 0 ? 2 : 3, std::move(inter[static_cast<std::size_t>(w)]), {}, w == 0);
        } catch (const strata::ConfigurationError& e) {
          errors[static_cast<std::size_t>(w)] = e.what();
        }
      });
  }
  for (const auto& error : errors)
    CHECK_MESSAGE(error.find("between 2 and 3 local replicas") != std::string::npos, error);
}

namespace {

// Runs body(rank) on one thread per rank of `group`; returns each rank's error message ("" if
// none) and the time the slowest rank took.
template <class Group, class Body>
std::vector<std::string> run_all(Group& group, Body body) {
  std::vector<std::string> errors(group.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < group.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          body(group[r], static_cast<int>(r));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
  }
  return errors;
}

}  // namespace

TEST_CASE("barrier returns on every replica of every worker") {
  auto group = loopback(2, 6);
  const auto errors = run_all(group, [](auto& rank, int) {
    for (int i = 0; i < 5; ++i)
      rank.barrier();
  });
  for (const auto& error : errors)
    CHECK_MESSAGE(error.empty(), error);
}

TEST_CASE("a replica calling with another count fails every replica of every worker") {
  using namespace std::chrono_literals;
  auto group = loopback(2, 4, {.timeout = 10s});
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_all(group, [](auto& rank, int r) {
    std::vector<float> data(r == 3 ? 11 : 10, 1.0F);  // worker 1's second replica differs
    rank.all_reduce(std::span(data), strata::ReduceOp::sum);
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    CAPTURE(r);
    CHECK_FALSE(errors[r].empty());
  }
  // Later calls refuse with the first failure.
  const auto later = run_all(group, [](auto& rank, int) {
    std::vector<float> data(10, 1.0F);
    rank.all_reduce(std::span(data), strata::ReduceOp::sum);
  });
  for (const auto& error : later)
    CHECK_FALSE(error.empty());
}

TEST_CASE("abort() on one replica releases every replica of every worker, with the reason") {
  using namespace std::chrono_literals;
  auto group = loopback(2, 4, {.timeout = 20s});
  const auto start = std::chrono::steady_clock::now();
  const auto errors = run_all(group, [](auto& rank, int r) {
    if (r == 3) {  // worker 1, replica 1 gives up instead of joining the collective
      std::this_thread::sleep_for(200ms);
      rank.abort("replica 3 gave up");
      return;
    }
    std::vector<float> data(1000, 1.0F);
    rank.all_reduce(std::span(data), strata::ReduceOp::sum);
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const auto& error = errors[static_cast<std::size_t>(r)];
    CHECK_MESSAGE(error.find("replica 3 gave up") != std::string::npos, error);
  }
}
