// strata/detail/usable_cpus.hpp — how many CPUs this process, and this host's processes, may
// run on.
#pragma once

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
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

/// The number of CPUs in a Linux CPU list ("0-3,8,10-11", as cpuset files and
/// /sys/devices/system/cpu/online write them; a trailing newline is allowed); nullopt when
/// it is empty or malformed.
inline std::optional<int> count_cpu_list(std::string_view list) noexcept {
  while (!list.empty() && (list.back() == '\n' || list.back() == ' '))
    list.remove_suffix(1);
  if (list.empty()) return std::nullopt;
  auto number = [&](unsigned& value) {
    const auto [end, error] = std::from_chars(list.data(), list.data() + list.size(), value);
    if (error != std::errc{}) return false;
    list.remove_prefix(static_cast<std::size_t>(end - list.data()));
    return true;
  };
  long count = 0;
  for (;;) {
    unsigned first = 0;
    unsigned last = 0;
    if (!number(first)) return std::nullopt;
    last = first;
    if (!list.empty() && list.front() == '-') {
      list.remove_prefix(1);
      if (!number(last) || last < first) return std::nullopt;
    }
    count += static_cast<long>(last - first) + 1;
    if (count > 1'000'000) return std::nullopt;
    if (list.empty()) return static_cast<int>(count);
    if (list.front() != ',') return std::nullopt;
    list.remove_prefix(1);
  }
}

namespace cgroup {

inline std::optional<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

// This process's cgroup path in the v2 hierarchy ("0::/path"), or in the v1 hierarchy that
// has `controller` ("3:cpuset:/path").
inline std::optional<std::string> path_of(std::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string_view controllers =
        std::string_view(line).substr(first + 1, second - first - 1);
    const bool match = controller.empty() ? line.compare(0, first, "0") == 0 && controllers.empty()
                                          : controllers.find(controller) != std::string_view::npos;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

// The CPUs a cgroup v2 "cpu.max" quota pays for ("max 100000": none), rounded up.
inline std::optional<int> quota_cpus(std::string_view max) noexcept {
  const auto space = max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  long quota = 0;
  long period = 0;
  const std::string_view q = max.substr(0, space);
  std::string_view p = max.substr(space + 1);
  while (!p.empty() && p.back() == '\n')
    p.remove_suffix(1);
  if (std::from_chars(q.data(), q.data() + q.size(), quota).ec != std::errc{} ||
      std::from_chars(p.data(), p.data() + p.size(), period).ec != std::errc{} || quota <= 0 ||
      period <= 0)
    return std::nullopt;
  return static_cast<int>(std::max(1L, (quota + period - 1) / period));
}

}  // namespace cgroup

/// The CPUs this host gives the processes of this process's container: the CPUs of its cgroup's
/// cpuset, fewer when a CPU quota (cgroup v2 cpu.max) pays for fewer, else the online CPUs.
/// Unlike usable_cpus(), a process's own affinity does not narrow it: ranks pinned one to a
/// CPU still share the host's CPUs, and this says how many there are. Read once, at least 1.
inline int host_cpus() {
  static const int cpus = [] {
    int count = 0;
#if defined(__linux__)
    count = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    std::optional<int> cpuset;
    std::optional<int> quota;
    if (const auto path = cgroup::path_of("")) {  // v2: one hierarchy
      const std::string dir = "/sys/fs/cgroup" + (*path == "/" ? std::string() : *path);
      if (const auto list = cgroup::read_line(dir + "/cpuset.cpus.effective"))
        cpuset = count_cpu_list(*list);
      if (const auto max = cgroup::read_line(dir + "/cpu.max")) quota = cgroup::quota_cpus(*max);
    }
    if (!cpuset)
      if (const auto path = cgroup::path_of("cpuset")) {  // v1: the cpuset hierarchy
        const std::string dir = "/sys/fs/cgroup/cpuset" + (*path == "/" ? std::string() : *path);
        if (const auto list = cgroup::read_line(dir + "/cpuset.effective_cpus"))
          cpuset = count_cpu_list(*list);
      }
    if (cpuset) count = std::min(count, *cpuset);
    if (quota) count = std::min(count, *quota);
#else
    count = static_cast<int>(std::thread::hardware_concurrency());
#endif
    return std::max(1, count);
  }();
  return cpus;
}

}  // namespace strata::detail
