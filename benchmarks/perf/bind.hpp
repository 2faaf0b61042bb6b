// benchmarks/perf/bind.hpp — which CPU each rank runs on (--bind).
//
// By default every rank strata-perf starts itself (threads with --transport local, processes
// with tcp, the Gloo peer's processes) is bound to a CPU, and the Open MPI contender of
// --compare gets the same CPUs through a rankfile, so that the contenders are placed alike:
// rank r on a CPU of its own when there are enough, and otherwise consecutive ranks sharing a
// CPU, ⌈ranks/CPUs⌉ to each, as `mpirun --map-by ppr:K:core` would place them (Open MPI 4.1's
// ppr mapping misplaces ranks once a core is overloaded, hence the rankfile). It matters here:
// a thread woken by another is usually placed on its waker's core (95% of condition-variable
// wake-ups on this KVM guest), and two ranks that share a core stay together for 20-40 ms
// before the scheduler spreads them, longer than a whole small-message sweep. Unbound, 4 ranks
// on 2 cores land in a different arrangement each launch: a small all-reduce took 14-16 µs in
// some launches and 23-26 µs in others. Consecutive ranks together, not round robin, because
// ring neighbours then pass half their messages within a core, where they are still in cache
// (4 ranks, 1 MiB ring all-reduce: a median of 541 µs against 797 round robin; RESULTS.md).
// Ranks that a launcher started (TF_CONFIG, torchrun, ...) are the launcher's to place.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sched.h>

#include <fmt/format.h>

namespace strata::perf {

enum class Binding {
  core,  ///< rank r on the ⌊r / ⌈ranks/N⌉⌋-th of the N CPUs this process may use
  none,  ///< wherever the scheduler puts them
};

inline std::string_view to_string(Binding binding) {
  return binding == Binding::core ? "core" : "none";
}

/// The CPUs the calling thread may run on, in increasing order.
inline std::vector<int> allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  return cpus;
}

/// The CPU rank `rank` of `ranks` is bound to, from `cpus` (allowed_cpus() of the process
/// that starts the ranks): consecutive ranks share a CPU when there are more ranks than CPUs;
/// nothing with Binding::none.
inline std::optional<int> cpu_of_rank(Binding binding, int rank, int ranks,
                                      const std::vector<int>& cpus) {
  if (binding == Binding::none || cpus.empty() || rank < 0 || rank >= ranks) return std::nullopt;
  const std::size_t per_cpu = (static_cast<std::size_t>(ranks) + cpus.size() - 1) / cpus.size();
  return cpus[static_cast<std::size_t>(rank) / per_cpu];
}

/// Confines the calling thread to `cpu`; threads it starts later inherit that. Safe between
/// fork and exec (one system call). False when the kernel refuses.
inline bool bind_calling_thread(int cpu) noexcept {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

/// Runs `f` with the calling thread, and what it forks, allowed on `cpus`, then gives the
/// thread its own CPUs back (also when `f` throws); with no `cpus`, runs `f` as it is. A rank
/// bound to one CPU measures the machine's two-process ceilings this way on the CPUs its whole
/// group was given, not squeezed onto its own.
template <class F>
auto on_cpus(const std::vector<int>& cpus, F&& f) {
  cpu_set_t own;
  CPU_ZERO(&own);
  if (cpus.empty() || ::sched_getaffinity(0, sizeof own, &own) != 0) return f();
  cpu_set_t wide;
  CPU_ZERO(&wide);
  for (const int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &wide);
  if (::sched_setaffinity(0, sizeof wide, &wide) != 0) return f();
  struct Restore {
    const cpu_set_t& own;
    ~Restore() { ::sched_setaffinity(0, sizeof own, &own); }
  } restore{own};
  return f();
}

/// CPUs as a header shows them: "CPU 1", "CPUs 0-3", "CPUs 0-2,5".
inline std::string describe_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return "no CPU";
  std::string text = cpus.size() == 1 ? "CPU " : "CPUs ";
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (i != 0) text += ',';
    text += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return text;
}

/// The CPUs the calling thread may run on, as a header shows them.
inline std::string describe_affinity() {
  return describe_cpus(allowed_cpus());
}

}  // namespace strata::perf
