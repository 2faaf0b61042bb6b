// Tests for strata/detail/spin_wait.hpp: when a waiter spins, and that a spinning waiter lets a
// partner that shares its core run.
#include <strata/detail/spin_wait.hpp>

#include <atomic>
#include <thread>

#include <pthread.h>
#include <sched.h>

#include <doctest/doctest.h>

using strata::detail::SpinPolicy;

namespace {

// Confines the calling thread to `cpu`.
void pin_to(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0);
}

}  // namespace

TEST_CASE("waiters spin only when every thread has a CPU of its own") {
  SUBCASE("as many threads as CPUs: spin, then yield") {
    const SpinPolicy policy = SpinPolicy::for_threads(1);
    CHECK(policy.spins > 0);
    CHECK(policy.yields > 0);
  }
  SUBCASE("more threads than this process may use: only yield") {
    int spins = -1;
    std::thread confined([&] {
      pin_to(::sched_getcpu());
      spins = SpinPolicy::for_threads(2).spins;  // one CPU, two threads
    });
    confined.join();
    CHECK(spins == 0);
  }
}

TEST_CASE("poll returns as soon as the condition holds, and false when it never does") {
  int calls = 0;
  CHECK(SpinPolicy{}.poll([&] { return ++calls == 3; }));
  CHECK(calls == 3);
  const SpinPolicy short_policy{10, 5};
  calls = 0;
  CHECK_FALSE(short_policy.poll([&] {
    ++calls;
    return false;
  }));
  CHECK(calls == 10 + 5 + 1);
}

// The scheduler often puts a woken thread on its waker's core. A waiter that spun there without
// a break would hold the core its partner needs for all of its spins: it must yield between
// bursts, so that a partner waiting for that core runs while the waiter is still spinning.
TEST_CASE("a spinning waiter lets a partner on its own core run") {
  std::atomic<bool> partner_ran{false};
  bool returned_ready = false;
  std::thread waiter([&] {
    const int cpu = ::sched_getcpu();
    pin_to(cpu);
    cpu_set_t same;
    CPU_ZERO(&same);
    CPU_SET(cpu, &same);
    pthread_attr_t attributes;
    REQUIRE(::pthread_attr_init(&attributes) == 0);
    REQUIRE(::pthread_attr_setaffinity_np(&attributes, sizeof same, &same) == 0);
    // The partner can only ever run on this core: it starts there, and it does not run
    // until the waiter gives the core away.
    pthread_t partner;
    REQUIRE(::pthread_create(
                &partner, &attributes,
                [](void* flag) -> void* {
                  static_cast<std::atomic<bool>*>(flag)->store(true, std::memory_order_release);
                  return nullptr;
                },
                &partner_ran) == 0);
    ::pthread_attr_destroy(&attributes);
    // The default spins and no yield phase: the partner must get the core while the waiter
    // spins, long before a scheduler tick would preempt it.
    SpinPolicy spin_only;
    spin_only.yields = 0;
    returned_ready = spin_only.poll([&] { return partner_ran.load(std::memory_order_acquire); });
    ::pthread_join(partner, nullptr);
  });
  waiter.join();
  CHECK(returned_ready);
}
