// strata/ps/shard_placement.hpp — which parameter-server task each shard of a variable goes to.
//
// Two rules, both TensorFlow's:
//
// - `RoundRobinPlacement` (TF2's ParameterServerStrategy, `_create_variable_round_robin` in
//   tensorflow/python/distribute/parameter_server_strategy_v2.py): one counter over every
//   variable and shard created, task = counter++ % num_ps. Sizes play no part, so one large
//   variable and many small ones can leave one server holding most of the bytes.
// - `GreedyPlacement` (TF1's GreedyLoadBalancingStrategy with byte_size_load_fn, in
//   tensorflow/contrib/training/python/training/device_setter.py): each shard goes to the task
//   with the fewest bytes so far, ties to the lowest index (numpy's argmin).
//
// Both depend on the order in which shards are placed: every process that computes a placement
// must place the same shards in the same order (in TF2 only the coordinator creates variables).
// Both keep the bytes placed on each task, the load report `describe_load` prints.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::ps {

/// A rule that assigns shards, one call to `place(shard_bytes)` each and in creation order, to
/// ps tasks `0 .. num_tasks() - 1`, and reports the bytes it has placed on each task.
template <class T>
concept ShardPlacement = requires(T& placement, const T& placed, std::size_t shard_bytes) {
  { placement.place(shard_bytes) } -> std::same_as<int>;
  { placed.num_tasks() } -> std::same_as<int>;
  { placed.bytes_per_task() } -> std::convertible_to<std::span<const std::uint64_t>>;
};

namespace detail {

// Zero bytes on each of `num_ps` tasks; a UsageError naming `operation` if there are none.
inline std::vector<std::uint64_t> empty_task_loads(int num_ps, std::string_view operation) {
  if (num_ps < 1)
    throw UsageError(-1, operation, fmt::format("num_ps is {}", num_ps),
                     "pass the number of ps tasks in the cluster, at least 1");
  return std::vector<std::uint64_t>(static_cast<std::size_t>(num_ps), 0);
}

}  // namespace detail

/// TF2's placement: the n-th shard placed (counting every variable and every shard, across
/// variables) goes to task n % num_ps. For example, a variable in 3 shards on 2 ps tasks takes
/// tasks 0, 1, 0, and the next variable starts on task 1.
///
/// @throws UsageError ("ps::RoundRobinPlacement") if `num_ps < 1`.
class RoundRobinPlacement {
 public:
  explicit RoundRobinPlacement(int num_ps)
      : bytes_per_task_(detail::empty_task_loads(num_ps, "ps::RoundRobinPlacement")) {}

  /// The task of the next shard, of `shard_bytes` bytes. O(1).
  int place(std::size_t shard_bytes) {
    const std::size_t task = placed_ % bytes_per_task_.size();
    ++placed_;
    bytes_per_task_[task] += shard_bytes;
    return static_cast<int>(task);
  }

  int num_tasks() const noexcept { return static_cast<int>(bytes_per_task_.size()); }
  /// The bytes placed on each task so far, indexed by task.
  std::span<const std::uint64_t> bytes_per_task() const noexcept { return bytes_per_task_; }

 private:
  std::vector<std::uint64_t> bytes_per_task_;
  std::uint64_t placed_ = 0;  // TF's _variable_count
};

/// TF1's byte-balancing placement: each shard goes to the task with the fewest bytes placed so
/// far (the lowest index among equals), then counts against it. With equal shard sizes it is
/// round robin; with one large variable among small ones it fills the other tasks with the
/// small ones first. Greedy, not optimal: placing in decreasing size order balances better,
/// but TF places in creation order, and so does this.
///
/// @throws UsageError ("ps::GreedyPlacement") if `num_ps < 1`.
class GreedyPlacement {
 public:
  explicit GreedyPlacement(int num_ps)
      : bytes_per_task_(detail::empty_task_loads(num_ps, "ps::GreedyPlacement")) {}

  /// The task of the next shard, of `shard_bytes` bytes. O(num_tasks()).
  int place(std::size_t shard_bytes) {
    // min_element returns the first of equal minima: ties go to the lowest index.
    const auto least = std::min_element(bytes_per_task_.begin(), bytes_per_task_.end());
    *least += shard_bytes;
    return static_cast<int>(std::distance(bytes_per_task_.begin(), least));
  }

  int num_tasks() const noexcept { return static_cast<int>(bytes_per_task_.size()); }
  /// The bytes placed on each task so far, indexed by task.
  std::span<const std::uint64_t> bytes_per_task() const noexcept { return bytes_per_task_; }

 private:
  std::vector<std::uint64_t> bytes_per_task_;
};

static_assert(ShardPlacement<RoundRobinPlacement>);
static_assert(ShardPlacement<GreedyPlacement>);

/// `bytes` in the largest binary unit that keeps the number at least 1, with one decimal
/// ("512 B", "1.5 KiB", "100.0 MiB").
inline std::string format_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  constexpr std::string_view kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

/// The load of each ps task in one line, for logs: "ps 0: 100.0 MiB, ps 1: 2.0 MiB".
inline std::string describe_load(std::span<const std::uint64_t> bytes_per_task) {
  std::string line;
  for (std::size_t task = 0; task < bytes_per_task.size(); ++task)
    line +=
        fmt::format("{}ps {}: {}", task == 0 ? "" : ", ", task, format_bytes(bytes_per_task[task]));
  return line;
}

}  // namespace strata::ps
