// Tests for strata/detail/usable_cpus.hpp: the count follows the affinity mask, not the
// machine.
#include <strata/detail/usable_cpus.hpp>

#include <thread>

#include <pthread.h>
#include <sched.h>

#include <doctest/doctest.h>

TEST_CASE("usable_cpus counts the CPUs of the affinity mask") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
  CHECK(strata::detail::usable_cpus() == CPU_COUNT(&mask));
  CHECK(strata::detail::usable_cpus() >= 1);
  CHECK(strata::detail::usable_cpus() <= static_cast<int>(std::thread::hardware_concurrency()));
}

TEST_CASE("a thread confined to one CPU sees one, whatever the machine has") {
  int seen = 0;
  std::thread confined([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(::sched_getcpu(), &one);
    REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0);
    seen = strata::detail::usable_cpus();
  });
  confined.join();
  CHECK(seen == 1);
}
