// Tests for strata/detail/usable_cpus.hpp: usable_cpus follows the affinity mask, not the
// machine; host_cpus follows the host (its cgroup), not the affinity mask; CPU lists parse.
#include <strata/detail/usable_cpus.hpp>

#include <thread>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <doctest/doctest.h>

namespace {

// What `count` returns on a thread confined to the CPU it runs on.
template <class Count>
int on_one_cpu(Count count) {
  int seen = 0;
  std::thread confined([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(::sched_getcpu(), &one);
    REQUIRE(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0);
    seen = count();
  });
  confined.join();
  return seen;
}

}  // namespace

TEST_CASE("usable_cpus counts the CPUs of the affinity mask") {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
  CHECK(strata::detail::usable_cpus() == CPU_COUNT(&mask));
  CHECK(strata::detail::usable_cpus() >= 1);
  CHECK(strata::detail::usable_cpus() <= static_cast<int>(std::thread::hardware_concurrency()));
}

TEST_CASE("a thread confined to one CPU sees one, whatever the machine has") {
  CHECK(on_one_cpu([] { return strata::detail::usable_cpus(); }) == 1);
}

TEST_CASE("host_cpus counts the host's CPUs, which pinning one process does not narrow") {
  const int host = strata::detail::count_host_cpus();
  CHECK(host >= 1);
  CHECK(host <= static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  CHECK(strata::detail::host_cpus() == host);
  // Counted afresh on a confined thread, not read from host_cpus()'s cache.
  CHECK(on_one_cpu([] { return strata::detail::count_host_cpus(); }) == host);
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

TEST_CASE("cgroup paths come from /proc/self/cgroup's v2 line or the v1 line of a controller") {
  using strata::detail::cgroup::path_in;
  const char* hybrid =
      "9:name=systemd:/\n4:memory:/jobs/7\n3:cpuset:/pinned\n"
      "2:cpu,cpuacct:/quota\n0::/unified/job\n";
  CHECK(path_in(hybrid, "") == "/unified/job");
  CHECK(path_in(hybrid, "cpuset") == "/pinned");
  CHECK(path_in(hybrid, "cpu") == "/quota");
  CHECK(path_in(hybrid, "cpuacct") == "/quota");
  CHECK_FALSE(path_in(hybrid, "cpus").has_value());
  CHECK(path_in("0::/\n", "") == "/");
  CHECK(path_in("0::/kubepods/pod1/c2", "") == "/kubepods/pod1/c2");  // no final newline
  CHECK_FALSE(path_in("0::/\n", "cpuset").has_value());
  CHECK_FALSE(path_in("3:cpuset:/x\n", "").has_value());
  CHECK_FALSE(path_in("", "").has_value());
  CHECK_FALSE(path_in("garbage\n::\n", "cpuset").has_value());
}
