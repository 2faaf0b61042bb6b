// strata/cluster/cluster_spec.hpp — the tasks of a distributed job and where they listen.
//
// A cluster is TensorFlow's `tf.train.ClusterSpec` restricted to the four jobs tf.distribute
// knows: `chief` (at most one task, the coordinator), `worker`, `ps` (parameter servers) and
// `evaluator`. Each job maps task indices (from 0; sparse allowed, as Kubeflow emits) to a
// `host:port` address.
//
// Besides lookup, the cluster answers the two questions every multi-process strategy asks:
//
// - Which tasks form the collective group, in which order? TF's rule: the chief first (if
//   any), then the workers by index; ps and evaluator tasks are not members
//   (`collective_rank`, `collective_task`, `collective_addresses`).
// - Are two processes looking at the same cluster? `fingerprint()` hashes a canonical text of
//   the whole cluster; the TCP handshake compares it to refuse peers from another job.
//
// Addresses are compared as text (cluster/address.hpp says why).
#pragma once

#include <array>
#include <charconv>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/address.hpp>
#include <strata/core/detail/fnv1a.hpp>
#include <strata/core/detail/text_formatter.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

// ---- declarations --------------------------------------------------------------------------

/// The jobs of a tf.distribute cluster. The numeric order is the canonical job order (used by
/// `ClusterSpec::canonical` and `make_tf_config`).
enum class TaskType : std::uint8_t { chief, worker, ps, evaluator };

}  // namespace strata::cluster

template <>
struct strata::EnumNames<strata::cluster::TaskType> {
  static constexpr std::array<std::string_view, 4> kNames{"chief", "worker", "ps", "evaluator"};
};

namespace strata::cluster {

using strata::to_string;

/// Every `TaskType`, in canonical order.
inline constexpr TaskType kTaskTypes[] = {TaskType::chief, TaskType::worker, TaskType::ps,
                                          TaskType::evaluator};

/// The largest task index a cluster accepts. Far beyond any real job; the bound turns absurd
/// configurations (an index of 10^12 in a sparse job) into a clear error.
inline constexpr int kMaxTaskIndex = 1'000'000;

/// The `TaskType` named `name` exactly as TF_CONFIG spells it (lower case), or `std::nullopt`.
/// Example: `parse_task_type("ps") == TaskType::ps`, `parse_task_type("master") == nullopt`.
constexpr std::optional<TaskType> parse_task_type(std::string_view name) noexcept;

/// One task of a cluster: its job and its index in that job.
struct Task {
  TaskType type = TaskType::worker;
  int index = 0;

  friend bool operator==(const Task&, const Task&) = default;
};

/// The tasks of a cluster and their addresses: TF's `tf.train.ClusterSpec`.
///
/// Invariants (checked by `add`): indices are in [0, kMaxTaskIndex]; no two tasks share an
/// address; the chief job has at most one task, index 0. Jobs may be sparse (indices with
/// holes), as in Kubeflow's TF_CONFIG, where each worker sees only itself and the ps tasks.
///
/// Value semantics; equality compares every task and address. Not synchronized: share a
/// `const ClusterSpec` between threads, not one being modified.
///
/// Example:
///
///     strata::cluster::ClusterSpec spec;
///     spec.add({TaskType::chief, 0}, parse_address("host0:2222"));
///     spec.add({TaskType::worker, 0}, parse_address("host1:2222"));
///     spec.collective_rank({TaskType::worker, 0});  // 1: the chief is rank 0
class ClusterSpec {
 public:
  /// An empty cluster.
  ClusterSpec() = default;

  /// Adds `task` at `address`.
  /// @throws ConfigurationError (operation "ClusterSpec::add") if the task is already present,
  ///   its index is negative or above `kMaxTaskIndex`, another task uses `address`, the
  ///   address is malformed (see `parse_address`), or a chief other than a single chief 0 is
  ///   added. The cluster is unchanged when it throws.
  void add(Task task, Address address);

  /// True when the cluster has no task.
  bool empty() const noexcept { return by_address_.empty(); }
  /// The number of tasks of `type` (present indices; a sparse job counts its holes as absent).
  std::size_t num_tasks(TaskType type) const noexcept { return tasks(type).size(); }
  /// The tasks of `type`, index → address, in ascending index order (empty if none).
  const std::map<int, Address>& tasks(TaskType type) const noexcept;
  bool contains(Task task) const noexcept;
  /// The address of `task`.
  /// @throws ConfigurationError (operation "ClusterSpec::address") "task not in cluster".
  const Address& address(Task task) const;
  /// The task listening at `address`, if any.
  std::optional<Task> find(const Address& address) const noexcept;
  bool has_chief() const noexcept { return !tasks(TaskType::chief).empty(); }

  /// The number of tasks in the collective group: the chief (if any) plus every worker.
  int collective_size() const noexcept;
  /// The rank of `task` in the collective group: the chief is rank 0, then the workers in
  /// index order (worker i is rank i, or i + 1 with a chief). `std::nullopt` for ps and
  /// evaluator tasks and for tasks not in the cluster. In a sparse worker job the rank is the
  /// worker's position among the workers present (`collective_addresses` refuses such a job).
  std::optional<int> collective_rank(Task task) const noexcept;
  /// The task at collective rank `rank` (the inverse of `collective_rank`).
  /// @throws UsageError (operation "ClusterSpec::collective_task") unless
  ///   0 <= rank < collective_size().
  Task collective_task(int rank) const;
  /// The addresses of the collective group in rank order.
  /// @throws ConfigurationError (operation "ClusterSpec::collective_addresses") naming the
  ///   missing indices when the worker job has holes: a collective needs every worker.
  std::vector<Address> collective_addresses() const;

  /// 64-bit FNV-1a hash of `canonical()`. Equal for equal clusters however they were written
  /// (JSON key order, dense list or sparse map); different, with overwhelming probability,
  /// when any task or address differs. Cost: O(total address length), no allocation.
  std::uint64_t fingerprint() const noexcept;
  /// The canonical text `fingerprint` hashes: "job:index=address" for every task, jobs in
  /// `kTaskTypes` order, indices ascending, joined by ';', addresses as `Address::to_string`.
  /// Example: "chief:0=host0:2222;worker:0=host1:2222;worker:1=[::1]:2222".
  std::string canonical() const;

  friend bool operator==(const ClusterSpec&, const ClusterSpec&) = default;

 private:
  // Feeds the canonical text to `sink` piece by piece, so that fingerprint() hashes it without
  // building a string.
  template <class Sink>
  void emit_canonical(Sink&& sink) const;

  std::array<std::map<int, Address>, std::size(kTaskTypes)> jobs_{};
  // Derived from jobs_ (so equality is unaffected); finds duplicate addresses in O(log n).
  std::map<Address, Task> by_address_{};
};

}  // namespace strata::cluster

// ---- fmt support ---------------------------------------------------------------------------

/// Formats as "type index": "worker 3".
template <>
struct fmt::formatter<strata::cluster::Task> : strata::detail::TextFormatter {
  template <class FormatContext>
  auto format(const strata::cluster::Task& task, FormatContext& ctx) const {
    return write(fmt::format("{} {}", task.type, task.index), ctx);
  }
};

// ---- definitions ---------------------------------------------------------------------------

namespace strata::cluster {

constexpr std::optional<TaskType> parse_task_type(std::string_view name) noexcept {
  for (const TaskType type : kTaskTypes) {
    if (to_string(type) == name) return type;
  }
  return std::nullopt;
}

// Helpers in their own namespace: sibling headers of cluster/ have detail helpers of their own.
namespace detail::spec {

// "0-2, 5, 7-9": the keys of `tasks` as ranges, at most `max_ranges` of them.
inline std::string describe_indices(const std::map<int, Address>& tasks, int max_ranges = 8) {
  std::string out;
  int ranges = 0;
  for (auto it = tasks.begin(); it != tasks.end();) {
    const int first = it->first;
    int last = first;
    for (++it; it != tasks.end() && it->first == last + 1; ++it)
      last = it->first;
    if (ranges == max_ranges) {
      out += ", ...";
      break;
    }
    if (ranges > 0) out += ", ";
    if (first == last) {
      out += fmt::format("{}", first);
    } else {
      out += fmt::format("{}-{}", first, last);
    }
    ++ranges;
  }
  return out;
}

// "chief 0; worker 0-2; ps 0-1", for messages that say what a cluster holds.
template <class Spec>
std::string describe_cluster(const Spec& spec) {
  std::string out;
  for (const TaskType type : kTaskTypes) {
    const auto& tasks = spec.tasks(type);
    if (tasks.empty()) continue;
    if (!out.empty()) out += "; ";
    out += fmt::format("{} {}", type, describe_indices(tasks));
  }
  return out.empty() ? std::string("no tasks") : out;
}

constexpr bool is_task_type(TaskType type) noexcept {
  return static_cast<std::size_t>(type) < std::size(kTaskTypes);
}

}  // namespace detail::spec

inline void ClusterSpec::add(Task task, Address address) {
  constexpr std::string_view kOperation = "ClusterSpec::add";
  auto fail = [&](std::string_view problem, std::string_view what_to_do) {
    throw ConfigurationError(
        -1, kOperation,
        fmt::format("cannot add {} {} at {}: {}", to_string(task.type), task.index,
                    detail::spec::quote_text(address.to_string()), problem),
        what_to_do);
  };
  if (!detail::spec::is_task_type(task.type))
    fail(fmt::format("{} is not a task type", static_cast<int>(task.type)),
         "use TaskType::chief, worker, ps or evaluator");
  if (task.index < 0) fail("the task index is negative", "number the tasks of a job from 0");
  if (task.index > kMaxTaskIndex)
    fail(fmt::format("the task index is above the limit of {}", kMaxTaskIndex),
         "number the tasks of a job from 0, without large gaps");
  if (address.port == 0) fail("the port is 0", "give every task a fixed port in [1, 65535]");
  if (std::string problem = detail::spec::host_problem(address.host); !problem.empty())
    fail(problem, detail::spec::kAddressHint);
  auto& job = jobs_[static_cast<std::size_t>(task.type)];
  if (task.type == TaskType::chief) {
    if (!job.empty())
      fail(fmt::format("the cluster already has a chief, at {}",
                       detail::spec::quote_text(job.begin()->second.to_string())),
           "a cluster has at most one chief; add the other tasks as workers");
    if (task.index != 0)
      fail("the chief is always task 0 of its job", "add the chief as {chief, 0}");
  }
  if (const auto it = job.find(task.index); it != job.end())
    fail(fmt::format("the cluster already has {} {}, at {}", to_string(task.type), task.index,
                     detail::spec::quote_text(it->second.to_string())),
         "give each task of a job its own index");
  if (const auto other = find(address))
    fail(fmt::format("{} {} already uses this address", to_string(other->type), other->index),
         "give every task its own host:port");

  const auto [position, inserted] = by_address_.emplace(address, task);
  try {
    job.emplace(task.index, std::move(address));
  } catch (...) {
    by_address_.erase(position);  // keep the two maps consistent (strong guarantee)
    throw;
  }
}

inline const std::map<int, Address>& ClusterSpec::tasks(TaskType type) const noexcept {
  static const std::map<int, Address> kNone;
  if (!detail::spec::is_task_type(type)) return kNone;
  return jobs_[static_cast<std::size_t>(type)];
}

inline bool ClusterSpec::contains(Task task) const noexcept {
  return tasks(task.type).contains(task.index);
}

inline const Address& ClusterSpec::address(Task task) const {
  const auto& job = tasks(task.type);
  const auto it = job.find(task.index);
  if (it == job.end()) {
    throw ConfigurationError(
        -1, "ClusterSpec::address",
        fmt::format("task not in cluster: {} {} (the cluster has {})", to_string(task.type),
                    task.index, detail::spec::describe_cluster(*this)),
        "ask only for tasks of the cluster (see ClusterSpec::contains)");
  }
  return it->second;
}

inline std::optional<Task> ClusterSpec::find(const Address& address) const noexcept {
  const auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  return it->second;
}

inline int ClusterSpec::collective_size() const noexcept {
  return static_cast<int>(tasks(TaskType::chief).size() + tasks(TaskType::worker).size());
}

inline std::optional<int> ClusterSpec::collective_rank(Task task) const noexcept {
  if (task.type == TaskType::chief) {
    return contains(task) ? std::optional<int>(0) : std::nullopt;
  }
  if (task.type != TaskType::worker) return std::nullopt;
  const auto& workers = tasks(TaskType::worker);
  const auto it = workers.find(task.index);
  if (it == workers.end()) return std::nullopt;
  const int offset = has_chief() ? 1 : 0;
  // Dense job: the index is the position; only a sparse one needs the O(n) walk.
  const bool dense = workers.rbegin()->first == static_cast<int>(workers.size()) - 1;
  const auto position = dense ? task.index : std::distance(workers.begin(), it);
  return offset + static_cast<int>(position);
}

inline Task ClusterSpec::collective_task(int rank) const {
  const int size = collective_size();
  if (rank < 0 || rank >= size) {
    throw UsageError(-1, "ClusterSpec::collective_task",
                     fmt::format("rank {} is out of range for a collective group of {} tasks "
                                 "(the cluster has {})",
                                 rank, size, detail::spec::describe_cluster(*this)),
                     "pass a rank from 0 to collective_size() - 1");
  }
  if (has_chief()) {
    if (rank == 0) return Task{TaskType::chief, 0};
    --rank;
  }
  const auto& workers = tasks(TaskType::worker);
  return Task{TaskType::worker, std::next(workers.begin(), rank)->first};
}

inline std::vector<Address> ClusterSpec::collective_addresses() const {
  const auto& workers = tasks(TaskType::worker);
  if (!workers.empty() && workers.rbegin()->first != static_cast<int>(workers.size()) - 1) {
    constexpr long long kMaxListed = 16;
    std::string listed;
    long long missing = 0;
    int expected = 0;
    for (const auto& [index, address] : workers) {
      for (; expected < index; ++expected, ++missing) {
        if (missing < kMaxListed) listed += fmt::format("{}{}", missing == 0 ? "" : ", ", expected);
      }
      expected = index + 1;
    }
    if (missing > kMaxListed) listed += fmt::format(" and {} more", missing - kMaxListed);
    throw ConfigurationError(
        -1, "ClusterSpec::collective_addresses",
        fmt::format("the worker job has holes: worker {} {} {} missing (present: {}); a "
                    "collective needs every worker from 0 to {}",
                    missing == 1 ? "index" : "indices", listed, missing == 1 ? "is" : "are",
                    detail::spec::describe_indices(workers), workers.rbegin()->first),
        "list every worker in the cluster (each process needs the full worker job, not the "
        "sparse form), or renumber the workers from 0 without gaps");
  }
  std::vector<Address> addresses;
  addresses.reserve(static_cast<std::size_t>(collective_size()));
  for (const auto& [index, address] : tasks(TaskType::chief))
    addresses.push_back(address);
  for (const auto& [index, address] : workers)
    addresses.push_back(address);
  return addresses;
}

template <class Sink>
void ClusterSpec::emit_canonical(Sink&& sink) const {
  bool first = true;
  auto emit_number = [&](unsigned long long value) {
    char digits[24];
    const auto result = std::to_chars(std::begin(digits), std::end(digits), value);
    sink(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
  };
  for (const TaskType type : kTaskTypes) {
    for (const auto& [index, address] : tasks(type)) {
      if (!first) sink(";");
      first = false;
      sink(to_string(type));
      sink(":");
      emit_number(static_cast<unsigned long long>(index));
      sink("=");
      const bool bracket = address.host.find(':') != std::string::npos;
      if (bracket) sink("[");
      sink(address.host);
      if (bracket) sink("]");
      sink(":");
      emit_number(address.port);
    }
  }
}

inline std::uint64_t ClusterSpec::fingerprint() const noexcept {
  std::uint64_t hash = strata::detail::kFnv1aBasis;
  emit_canonical(
      [&hash](std::string_view piece) noexcept { hash = strata::detail::fnv1a(hash, piece); });
  return hash;
}

inline std::string ClusterSpec::canonical() const {
  std::string text;
  emit_canonical([&text](std::string_view piece) { text += piece; });
  return text;
}

}  // namespace strata::cluster
