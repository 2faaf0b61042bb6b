// tests/support/fuzz/tf_config.hpp — the TF_CONFIG fuzz target.
//
// One function shared by the libFuzzer entry point (tests/fuzz/tf_config_fuzz.cpp) and the
// bounded random-input test every build runs (tests/cluster/tf_config_random_test.cpp). It
// calls std::abort() — a crash to libFuzzer, a failed test to ctest — when:
//   - parse_tf_config throws anything but strata::ConfigurationError;
//   - an accepted TF_CONFIG breaks an invariant of ClusterSpec (lookup, the collective rank
//     rule, fingerprint = FNV-1a of canonical());
//   - make_tf_config of an accepted cluster does not parse back to an equal cluster, task and
//     fingerprint.
// The same bytes also go through parse_address, with its own round trip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/tf_config.hpp>
#include <strata/core/error.hpp>

namespace strata::testing {

namespace fuzz_detail {

[[noreturn]] inline void tf_config_failure(std::string_view what, std::string_view input) {
  std::fprintf(stderr, "fuzz_tf_config: %.*s\ninput (%zu bytes): %.*s\n",
               static_cast<int>(what.size()), what.data(), input.size(),
               static_cast<int>(input.size() < 2000 ? input.size() : 2000), input.data());
  std::abort();
}

inline std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

// Checks what must hold for every cluster parse_tf_config accepts.
inline void check_cluster(const cluster::TfConfig& config, std::string_view input) {
  using cluster::Task;
  using cluster::TaskType;
  const cluster::ClusterSpec& spec = config.cluster;
  auto require = [&](bool condition, std::string_view what) {
    if (!condition) tf_config_failure(what, input);
  };
  require(!spec.empty(), "an accepted cluster is empty");
  if (config.task) require(spec.contains(*config.task), "the task is not in the cluster");

  std::size_t tasks = 0;
  for (const TaskType type : cluster::kTaskTypes) {
    for (const auto& [index, address] : spec.tasks(type)) {
      ++tasks;
      const Task task{type, index};
      require(index >= 0 && index <= cluster::kMaxTaskIndex, "index out of bounds");
      require(spec.contains(task) && spec.address(task) == address, "lookup disagrees");
      require(spec.find(address) == task, "find(address) disagrees");
      require(cluster::parse_address(address.to_string()) == address,
              "an address does not survive to_string/parse_address");
    }
  }
  require(tasks >= 1 && (spec.num_tasks(TaskType::chief) <= 1), "task counts");

  const int size = spec.collective_size();
  require(static_cast<std::size_t>(size) ==
              spec.num_tasks(TaskType::chief) + spec.num_tasks(TaskType::worker),
          "collective_size");
  // collective_task walks a sparse job: check the first ranks and the last one only.
  auto check_rank = [&](int rank) {
    require(spec.collective_rank(spec.collective_task(rank)) == rank,
            "collective_task and collective_rank are not inverse");
  };
  for (int rank = 0; rank < size && rank < 64; ++rank)
    check_rank(rank);
  if (size > 0) check_rank(size - 1);
  require(!spec.collective_rank(Task{TaskType::ps, 0}) &&
              !spec.collective_rank(Task{TaskType::evaluator, 0}),
          "ps or evaluator in the collective group");
  try {
    require(spec.collective_addresses().size() == static_cast<std::size_t>(size),
            "collective_addresses has the wrong size");
  } catch (const ConfigurationError&) {
    const auto& workers = spec.tasks(TaskType::worker);
    require(!workers.empty() && workers.rbegin()->first + 1 != static_cast<int>(workers.size()),
            "collective_addresses refused a worker job without holes");
  }
  require(spec.fingerprint() == fnv1a(spec.canonical()), "fingerprint is not FNV-1a of canonical");

  // The round trip through make_tf_config, for this process's task or the first one.
  Task task{};
  if (config.task) {
    task = *config.task;
  } else {
    for (const TaskType type : cluster::kTaskTypes) {
      if (!spec.tasks(type).empty()) {
        task = Task{type, spec.tasks(type).begin()->first};
        break;
      }
    }
  }
  const std::string text = cluster::make_tf_config(spec, task);
  const cluster::TfConfig again = cluster::parse_tf_config(text);
  require(again.cluster == spec, "make_tf_config does not parse back to the same cluster");
  require(again.task == task, "make_tf_config does not parse back to the same task");
  require(again.cluster.fingerprint() == spec.fingerprint(), "the fingerprint changed");
  require(again.cluster.canonical() == spec.canonical(), "the canonical text changed");
}

}  // namespace fuzz_detail

/// Feeds `bytes` to parse_tf_config (and parse_address) and checks the results; aborts on any
/// failure (see the top of this file). Deterministic; never throws.
inline void fuzz_tf_config(std::span<const std::uint8_t> bytes) {
  const std::string_view input(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  try {
    cluster::TfConfig config;
    try {
      config = cluster::parse_tf_config(input);
    } catch (const ConfigurationError& e) {
      if (std::string_view(e.what()).find("strata: TF_CONFIG: ") != 0)
        fuzz_detail::tf_config_failure("a TF_CONFIG error without the TF_CONFIG prefix", input);
      config = {};
    }
    if (!config.cluster.empty()) fuzz_detail::check_cluster(config, input);

    try {
      const cluster::Address address = cluster::parse_address(input);
      if (cluster::parse_address(address.to_string()) != address)
        fuzz_detail::tf_config_failure("parse_address does not survive to_string", input);
    } catch (const ConfigurationError&) {
      // Rejected: fine.
    }
  } catch (const std::exception& e) {
    fuzz_detail::tf_config_failure(std::string("unexpected exception: ") + e.what(), input);
  } catch (...) {
    fuzz_detail::tf_config_failure("unexpected exception of unknown type", input);
  }
}

}  // namespace strata::testing
