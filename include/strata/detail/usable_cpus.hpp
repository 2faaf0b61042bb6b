// strata/detail/usable_cpus.hpp — how many CPUs this process may run on.
#pragma once

#include <algorithm>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata::detail {

/// The CPUs this process may run on: its affinity mask (taskset, cpusets, a container's
/// cpuset), not the machine's count, which std::thread::hardware_concurrency() reports. A
/// process confined to one core of a large machine must not size its spinning or its replica
/// count by the machine. At least 1.
inline int usable_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) == 0) return std::max(1, CPU_COUNT(&mask));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace strata::detail
