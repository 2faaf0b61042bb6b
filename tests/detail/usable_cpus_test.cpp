// Tests for strata/detail/usable_cpus.hpp: usable_cpus follows the affinity mask, not the
// machine; host_cpus follows the host (its cgroup), not the affinity mask; CPU lists parse.
#include <strata/detail/usable_cpus.hpp>

#include <thread>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

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

TEST_CASE("host_cpus counts the host's CPUs, which pinning one process does not narrow") {
  const int host = strata::detail::host_cpus();
  CHECK(host >= 1);
  CHECK(host <= static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  int seen = 0;
  std::thread confined([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(::sched_getcpu(), &one);
    REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0);
    seen = strata::detail::host_cpus();
  });
  confined.join();
  CHECK(seen == host);
}

TEST_CASE("CPU lists: ranges, single CPUs and a trailing newline count; anything else is refused") {
  using strata::detail::count_cpu_list;
  CHECK(count_cpu_list("0") == 1);
  CHECK(count_cpu_list("0-1\n") == 2);
  CHECK(count_cpu_list("0-3,8,10-11") == 7);
  CHECK(count_cpu_list("5-5") == 1);
  CHECK(count_cpu_list("0-1023") == 1024);
  for (const char* bad : {"", "\n", "-", "1-", "-3", "3-1", "0,", ",0", "0,,1", "a", "0-1x", "1 2",
                          "0-4294967295,0-4294967295"}) {
    CAPTURE(bad);
    CHECK_FALSE(count_cpu_list(bad).has_value());
  }
}

TEST_CASE("a cgroup v2 cpu.max quota pays for its CPUs rounded up; 'max' is no quota") {
  using strata::detail::cgroup::quota_cpus;
  CHECK(quota_cpus("200000 100000\n") == 2);
  CHECK(quota_cpus("150000 100000") == 2);
  CHECK(quota_cpus("1000 100000") == 1);
  CHECK_FALSE(quota_cpus("max 100000").has_value());
  CHECK_FALSE(quota_cpus("100000").has_value());
  CHECK_FALSE(quota_cpus("0 100000").has_value());
  CHECK_FALSE(quota_cpus("100000 0").has_value());
  CHECK_FALSE(quota_cpus("").has_value());
}
