// Tests for strata/communicator/communicator.hpp (the Communicator concept) and
// strata/communicator/self.hpp: which types model the concept and which near-misses do not; the
// archetype and the test doubles of communicator_doubles.hpp behave as documented; the group of
// one (SelfCommunicator) is the identity for every collective and still validates its calls.
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/self.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <collective_reference/inputs.hpp>

#include "communicator_doubles.hpp"

namespace {

using namespace std::chrono_literals;
using strata::ReduceOp;
using strata::communicator::CallOptions;
using strata::communicator::Communicator;
using strata::communicator::CommunicatorFor;
using strata::communicator::CommunicatorOptions;
using strata::communicator::LocalCommunicator;
using strata::communicator::SelfCommunicator;
using strata::communicator::Work;
using strata::testing::ArchetypeDefects;
using strata::testing::BasicLoopbackCommunicator;
using strata::testing::FailingCommunicator;
using strata::testing::LoopbackCommunicator;
using strata::testing::StallingCommunicator;
using Clock = std::chrono::steady_clock;
namespace testing = strata::testing;
namespace reference = strata::reference;

// ---- who models Communicator -------------------------------------------------------------------

static_assert(Communicator<LocalCommunicator<strata::algorithms::AllReduceScatterGather>>);
static_assert(Communicator<LocalCommunicator<strata::algorithms::AllReduceReduceToOne>>);
static_assert(Communicator<SelfCommunicator>);
static_assert(Communicator<LoopbackCommunicator>);
static_assert(Communicator<FailingCommunicator>);
static_assert(Communicator<StallingCommunicator>);

// Near-misses: each differs from the archetype in exactly one requirement.
using MissingAsyncTwin =
    BasicLoopbackCommunicator<ArchetypeDefects{.no_reduce_scatter_async = true}>;
using MissingBarrier = BasicLoopbackCommunicator<ArchetypeDefects{.no_barrier = true}>;
using MissingAbort = BasicLoopbackCommunicator<ArchetypeDefects{.no_abort = true}>;
using FloatOnly = BasicLoopbackCommunicator<ArchetypeDefects{.float_only = true}>;
using SizeTRank = BasicLoopbackCommunicator<ArchetypeDefects{.size_t_rank = true}>;

static_assert(!Communicator<MissingAsyncTwin>, "reduce_scatter_async is required");
static_assert(!CommunicatorFor<MissingAsyncTwin, float>, "reduce_scatter_async is required");
static_assert(!Communicator<MissingBarrier>, "barrier() is required");
static_assert(CommunicatorFor<MissingBarrier, float>, "barrier() is not part of CommunicatorFor");
static_assert(!Communicator<MissingAbort>, "abort() is required");
static_assert(CommunicatorFor<MissingAbort, float>, "abort() is not part of CommunicatorFor");
static_assert(!Communicator<FloatOnly>, "every element type is required");
static_assert(CommunicatorFor<FloatOnly, float>, "the float-only near-miss is right for float");
static_assert(!CommunicatorFor<FloatOnly, double>);
static_assert(!CommunicatorFor<FloatOnly, strata::bfloat16>);
static_assert(!Communicator<SizeTRank>, "rank() must return int");
static_assert(!CommunicatorFor<SizeTRank, float>, "rank() must return int");
static_assert(!Communicator<int>);
// Element types outside ElementTypes are not asked for.
static_assert(!CommunicatorFor<LoopbackCommunicator, std::int16_t>);

// ---- helpers -----------------------------------------------------------------------------------

template <class T>
std::vector<T> inputs(std::size_t count, int salt, ReduceOp op = ReduceOp::sum) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = reference::input_value<T>(salt, i, op, /*ranks=*/1);
  return values;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Code written once against the concept: averages gradients over the group, then broadcasts
// rank 0's step count. It must run unchanged on every model.
template <Communicator C>
void synchronize_step(C& comm, std::span<float> gradients, std::span<std::int64_t> step) {
  Work work = comm.all_reduce_async(gradients, ReduceOp::mean);
  comm.broadcast(step, 0);
  work.wait();
  comm.barrier();
}

}  // namespace

TEST_CASE_TEMPLATE("code written against Communicator runs unchanged on a group of one", C,
                   LoopbackCommunicator, SelfCommunicator) {
  auto group = C::create(1);
  REQUIRE(group.size() == 1);
  C& comm = group.front();
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  std::vector<float> gradients{0.5f, -1.25f, 3.0f};
  std::vector<std::int64_t> step{42};
  synchronize_step(comm, std::span(gradients), std::span(step));
  CHECK(gradients == std::vector<float>{0.5f, -1.25f, 3.0f});
  CHECK(step == std::vector<std::int64_t>{42});
}

TEST_CASE("the test doubles' names identify them in messages") {
  CHECK(LoopbackCommunicator::kName == "loopback");
  CHECK(FailingCommunicator::kName == "failing");
  CHECK(StallingCommunicator::kName == "stalling");
  CHECK(SelfCommunicator::kName == "self");
}

// ---- the failing double ------------------------------------------------------------------------

TEST_CASE(
    "FailingCommunicator throws PeerFailureError from every call, and from wait() and "
    "test() of every asynchronous call") {
  auto group = FailingCommunicator::create(3);
  REQUIRE(group.size() == 3);
  FailingCommunicator& comm = group[1];
  CHECK(comm.rank() == 1);
  CHECK(comm.size() == 3);
  std::vector<float> data(6), out(6), block(2);
  const std::span<const float> in(data);
  const std::vector<std::function<void()>> blocking{
      [&] { comm.all_reduce(std::span(data), ReduceOp::sum); },
      [&] { comm.all_reduce(in, std::span(out), ReduceOp::sum); },
      [&] { comm.broadcast(std::span(data), 0); },
      [&] { comm.broadcast(in, std::span(out), 0); },
      [&] { comm.reduce(std::span(data), ReduceOp::max, 0); },
      [&] { comm.reduce(in, std::span(out), ReduceOp::max, 0); },
      [&] { comm.all_gather(std::span(data)); },
      [&] { comm.all_gather(std::span<const float>(block), std::span(data)); },
      [&] { comm.reduce_scatter(std::span(data), ReduceOp::sum); },
      [&] { comm.reduce_scatter(in, std::span(block), ReduceOp::sum); },
      [&] { comm.barrier(); },
      [&] { comm.barrier(CallOptions{.timeout = 1s}); },
  };
  for (const auto& call : blocking) {
    CHECK_THROWS_AS(call(), strata::PeerFailureError);
    CHECK_THROWS_WITH(call(), doctest::Contains("injected failure"));
  }
  std::vector<Work> works;
  works.push_back(comm.all_reduce_async(std::span(data), ReduceOp::sum));
  works.push_back(comm.all_reduce_async(in, std::span(out), ReduceOp::sum));
  works.push_back(comm.broadcast_async(std::span(data), 0));
  works.push_back(comm.reduce_async(in, std::span(out), ReduceOp::sum, 0));
  works.push_back(comm.all_gather_async(std::span<const float>(block), std::span(data)));
  works.push_back(comm.reduce_scatter_async(in, std::span(block), ReduceOp::sum));
  works.push_back(comm.barrier_async());
  for (Work& work : works) {
    CHECK(work.valid());
    CHECK_THROWS_AS(work.test(), strata::PeerFailureError);
    CHECK_THROWS_AS(work.wait(), strata::PeerFailureError);
  }
}

// ---- the stalling double -----------------------------------------------------------------------

TEST_CASE("StallingCommunicator blocks every call until its deadline, then throws TimeoutError") {
  constexpr auto kDeadline = 150ms;
  constexpr auto kSlack = 1500ms;
  SUBCASE("the communicator's deadline") {
    auto group = StallingCommunicator::create(2, CommunicatorOptions{.timeout = kDeadline});
    std::vector<double> data(4);
    const auto start = Clock::now();
    CHECK_THROWS_AS(group[0].all_reduce(std::span(data), ReduceOp::sum), strata::TimeoutError);
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= kDeadline);
    CHECK(elapsed < kDeadline + kSlack);
  }
  SUBCASE("a per-call deadline overrides it") {
    auto group = StallingCommunicator::create(2, CommunicatorOptions{.timeout = 60s});
    const auto start = Clock::now();
    CHECK_THROWS_AS(group[1].barrier(CallOptions{.timeout = kDeadline}), strata::TimeoutError);
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= kDeadline);
    CHECK(elapsed < kDeadline + kSlack);
  }
  SUBCASE("an asynchronous call completes with TimeoutError at its deadline") {
    auto group = StallingCommunicator::create(1, CommunicatorOptions{.timeout = 60s});
    std::vector<strata::float16> data(4);
    const auto start = Clock::now();
    Work work = group[0].all_gather_async(std::span(data), CallOptions{.timeout = kDeadline});
    CHECK_THROWS_AS(work.wait(), strata::TimeoutError);
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= kDeadline);
    CHECK(elapsed < kDeadline + kSlack);
    CHECK_THROWS_AS(work.test(), strata::TimeoutError);
  }
}

TEST_CASE("StallingCommunicator::abort wakes pending calls on every rank with PeerFailureError") {
  auto group = StallingCommunicator::create(2, CommunicatorOptions{.timeout = 30s});
  std::vector<float> data(4);
  const auto start = Clock::now();
  Work pending = group[1].all_reduce_async(std::span(data), ReduceOp::sum);
  // Either order (abort before or during the wait) must end in PeerFailureError; the delay
  // makes "during" the likely one.
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    group[1].abort("replica 1 was preempted");
  });
  CHECK_THROWS_WITH_AS(group[0].broadcast(std::span(data), 0),
                       doctest::Contains("rank 1 aborted: replica 1 was preempted"),
                       strata::PeerFailureError);
  aborter.join();
  CHECK_THROWS_AS(pending.wait(), strata::PeerFailureError);
  CHECK(Clock::now() - start < 10s);                              // woken, not timed out
  CHECK_THROWS_AS(group[0].barrier(), strata::PeerFailureError);  // and later calls fail at once
}

// ---- the archetype -----------------------------------------------------------------------------

TEST_CASE("LoopbackCommunicator copies out of place, keeps data in place, and validates") {
  auto comm = std::move(LoopbackCommunicator::create().front());
  const auto input = inputs<std::int32_t>(5, 0);
  std::vector<std::int32_t> data = input, out(5);
  comm.all_reduce(std::span(data), ReduceOp::product);
  CHECK(data == input);
  comm.reduce_scatter(std::span<const std::int32_t>(input), std::span(out), ReduceOp::min);
  CHECK(out == input);
  CHECK_THROWS_AS(comm.broadcast(std::span(data), 1), strata::UsageError);
  CHECK_THROWS_AS(comm.all_gather(std::span<const std::int32_t>(input), std::span(out).first(4)),
                  strata::UsageError);
  CHECK_THROWS_AS(LoopbackCommunicator::create(2), strata::UsageError);
  comm.abort("done");
  CHECK_THROWS_AS(comm.barrier(), strata::PeerFailureError);
  CHECK_THROWS_AS(comm.barrier_async().wait(), strata::PeerFailureError);
}

// ---- SelfCommunicator --------------------------------------------------------------------------

TEST_CASE_TEMPLATE(
    "SelfCommunicator is the identity for every collective and op, in and out of "
    "place, blocking and asynchronous",
    T, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, strata::float16, strata::bfloat16,
    float, double) {
  auto group = SelfCommunicator::create();
  REQUIRE(group.size() == 1);
  SelfCommunicator& comm = group.front();
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  for (std::size_t count : {0u, 1u, 7u, 1023u}) {
    for (ReduceOp op : strata::kAllReduceOps) {
      CAPTURE(count);
      CAPTURE(strata::to_string(op));
      const auto input = inputs<T>(count, 3, op);
      auto check_in_place = [&](auto&& call) {
        std::vector<T> data = input;
        call(std::span(data));
        CHECK(same_bits(data, input));
      };
      auto check_out_of_place = [&](auto&& call) {
        std::vector<T> out(count, reference::input_value<T>(9, 0, op, /*ranks=*/1));
        call(std::span<const T>(input), std::span(out));
        CHECK(same_bits(out, input));
      };
      check_in_place([&](std::span<T> d) { comm.all_reduce(d, op); });
      check_in_place([&](std::span<T> d) { comm.all_reduce_async(d, op).wait(); });
      check_in_place([&](std::span<T> d) { comm.broadcast(d, 0); });
      check_in_place([&](std::span<T> d) { comm.broadcast_async(d, 0).wait(); });
      check_in_place([&](std::span<T> d) { comm.reduce(d, op, 0); });
      check_in_place([&](std::span<T> d) { comm.reduce_async(d, op, 0).wait(); });
      check_in_place([&](std::span<T> d) { comm.all_gather(d); });
      check_in_place([&](std::span<T> d) { comm.all_gather_async(d).wait(); });
      check_in_place([&](std::span<T> d) { comm.reduce_scatter(d, op); });
      check_in_place([&](std::span<T> d) { comm.reduce_scatter_async(d, op).wait(); });
      check_out_of_place([&](std::span<const T> s, std::span<T> r) { comm.all_reduce(s, r, op); });
      check_out_of_place(
          [&](std::span<const T> s, std::span<T> r) { comm.all_reduce_async(s, r, op).wait(); });
      check_out_of_place([&](std::span<const T> s, std::span<T> r) { comm.broadcast(s, r, 0); });
      check_out_of_place(
          [&](std::span<const T> s, std::span<T> r) { comm.broadcast_async(s, r, 0).wait(); });
      check_out_of_place([&](std::span<const T> s, std::span<T> r) { comm.reduce(s, r, op, 0); });
      check_out_of_place(
          [&](std::span<const T> s, std::span<T> r) { comm.reduce_async(s, r, op, 0).wait(); });
      check_out_of_place([&](std::span<const T> s, std::span<T> r) { comm.all_gather(s, r); });
      check_out_of_place(
          [&](std::span<const T> s, std::span<T> r) { comm.all_gather_async(s, r).wait(); });
      check_out_of_place(
          [&](std::span<const T> s, std::span<T> r) { comm.reduce_scatter(s, r, op); });
      check_out_of_place([&](std::span<const T> s, std::span<T> r) {
        comm.reduce_scatter_async(s, r, op).wait();
      });
    }
  }
  comm.barrier();
  comm.barrier_async().wait();
}

TEST_CASE("SelfCommunicator::create accepts a group of one only") {
  CHECK_NOTHROW(SelfCommunicator::create(1));
  for (int size : {0, 2, -1}) {
    CAPTURE(size);
    CHECK_THROWS_AS(SelfCommunicator::create(size), strata::UsageError);
  }
  CHECK_THROWS_WITH(SelfCommunicator::create(2), doctest::Contains("exactly one rank, got size 2"));
}

TEST_CASE("SelfCommunicator validates spans and roots, and refuses calls after an error") {
  std::vector<float> in(4, 1.0f), short_out(3), long_out(5);
  const std::span<const float> send(in);
  struct Bad {
    const char* name;
    std::function<void(SelfCommunicator&)> call;
    const char* says;
  };
  const std::vector<Bad> bad_calls{
      {"all_reduce recv too short",
       [&](SelfCommunicator& c) { c.all_reduce(send, std::span(short_out), ReduceOp::sum); },
       "recv has 3 elements, expected 4"},
      {"broadcast recv too long",
       [&](SelfCommunicator& c) { c.broadcast(send, std::span(long_out), 0); },
       "recv has 5 elements, expected 4"},
      {"reduce recv too short at the root",
       [&](SelfCommunicator& c) { c.reduce(send, std::span(short_out), ReduceOp::sum, 0); },
       "recv has 3 elements, expected 4"},
      {"all_gather recv too long",
       [&](SelfCommunicator& c) { c.all_gather(send, std::span(long_out)); },
       "recv has 5 elements, expected 4"},
      {"reduce_scatter send/recv sizes",
       [&](SelfCommunicator& c) { c.reduce_scatter(send, std::span(short_out), ReduceOp::sum); },
       "send has 4 elements"},
      {"broadcast root 1", [&](SelfCommunicator& c) { c.broadcast(std::span(long_out), 1); },
       "root 1 is not a rank of this group of 1"},
      {"reduce root -1",
       [&](SelfCommunicator& c) { c.reduce(std::span(long_out), ReduceOp::max, -1); },
       "root -1 is not a rank of this group of 1"},
      {"asynchronous broadcast root 1",
       [&](SelfCommunicator& c) { c.broadcast_async(std::span(long_out), 1).wait(); },
       "root 1 is not a rank of this group of 1"},
  };
  for (const Bad& bad : bad_calls) {
    CAPTURE(bad.name);
    auto group = SelfCommunicator::create();
    SelfCommunicator& comm = group.front();
    CHECK_THROWS_WITH_AS(bad.call(comm), doctest::Contains(bad.says), strata::UsageError);
    // The group is failed now: even a valid call throws.
    std::vector<float> data(4);
    CHECK_THROWS_AS(comm.all_reduce(std::span(data), ReduceOp::sum), strata::Error);
    CHECK_THROWS_AS(comm.barrier(), strata::Error);
  }
}

TEST_CASE("SelfCommunicator::abort fails every later call with PeerFailureError") {
  auto group = SelfCommunicator::create();
  group.front().abort("shutting down");
  std::vector<double> data(2);
  CHECK_THROWS_WITH_AS(group.front().all_reduce(std::span(data), ReduceOp::mean),
                       doctest::Contains("rank 0 aborted: shutting down"),
                       strata::PeerFailureError);
  CHECK_THROWS_AS(group.front().barrier_async().wait(), strata::PeerFailureError);
}
