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
#include <utility>
#include <vector>

namespace strata::perf {

enum class Binding {
  core,  ///< rank r on the ⌊r / ⌈ranks/N⌉⌋-th of the N CPUs this process may use
  none,  ///< wherever the scheduler puts them
};

std::string_view to_string(Binding binding);

/// The CPUs the calling thread may run on, in increasing order.
std::vector<int> allowed_cpus();

/// The CPU rank `rank` of `ranks` is bound to, from `cpus` (allowed_cpus() of the process
/// that starts the ranks): consecutive ranks share a CPU when there are more ranks than CPUs;
/// nothing with Binding::none.
std::optional<int> cpu_of_rank(Binding binding, int rank, int ranks, const std::vector<int>& cpus);

/// Confines the calling thread to `cpu`; threads it starts later inherit that. Safe between
/// fork and exec (one system call). False when the kernel refuses.
bool bind_calling_thread(int cpu) noexcept;

/// While it lives, the calling thread (and what it forks) may run on `cpus`; then it gets its
/// own CPUs back. Does nothing with no `cpus`, or when the kernel refuses.
class WidenedAffinity {
 public:
  explicit WidenedAffinity(const std::vector<int>& cpus);
  WidenedAffinity(const WidenedAffinity&) = delete;
  WidenedAffinity& operator=(const WidenedAffinity&) = delete;
  ~WidenedAffinity();

 private:
  std::vector<int> own_;  ///< empty: nothing to restore
};

/// Runs `f` with the calling thread, and what it forks, allowed on `cpus`, then gives the
/// thread its own CPUs back (also when `f` throws); with no `cpus`, runs `f` as it is. A rank
/// bound to one CPU measures the machine's two-process ceilings this way on the CPUs its whole
/// group was given, not squeezed onto its own.
template <class F>
auto on_cpus(const std::vector<int>& cpus, F&& f) {
  const WidenedAffinity widened(cpus);
  return std::forward<F>(f)();
}

/// CPUs as a header shows them: "CPU 1", "CPUs 0-3", "CPUs 0-2,5".
std::string describe_cpus(const std::vector<int>& cpus);

/// The CPUs the calling thread may run on, as a header shows them.
std::string describe_affinity();

}  // namespace strata::perf
