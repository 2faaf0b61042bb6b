// strata/detail/usable_cpus.hpp — how many CPUs this process, and this host's processes, may
// run on.
#pragma once

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
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
    if (!number(first)) return std::nullopt;
    unsigned last = first;
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

// A cgroup path from /proc/self/cgroup's `contents`: in the v2 hierarchy ("0::/path") for an
// empty `controller`, else in the v1 hierarchy that has it ("3:cpu,cpuacct:/path").
inline std::optional<std::string> path_in(std::string_view contents, std::string_view controller) {
  while (!contents.empty()) {
    const auto newline = contents.find('\n');
    const std::string_view line = contents.substr(0, newline);
    contents =
        newline == std::string_view::npos ? std::string_view() : contents.substr(newline + 1);
    const auto first = line.find(':');
    const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    bool match = controller.empty() && line.substr(0, first) == "0" && controllers.empty();
    for (std::string_view rest = controllers; !controller.empty() && !rest.empty();) {
      const auto comma = rest.find(',');
      match = match || rest.substr(0, comma) == controller;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (match) return std::string(line.substr(second + 1));
  }
  return std::nullopt;
}

inline std::optional<std::string> path_of(std::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  const std::string contents{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return path_in(contents, controller);
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
/// CPU still share the host's CPUs, and this says how many there are. At least 1.
inline int count_host_cpus() {
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
}

/// count_host_cpus(), read once per process.
inline int host_cpus() {
  static const int cpus = count_host_cpus();
  return cpus;
}

}  // namespace strata::detail
