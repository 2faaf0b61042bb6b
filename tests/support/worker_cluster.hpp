// tests/support/worker_cluster.hpp — clusters of strata_test_tcp_worker processes on loopback.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/tf_config.hpp>

#include "process.hpp"

namespace strata::testing {

inline std::string temp_path(std::string_view name) {
  return (std::filesystem::temp_directory_path() /
          fmt::format("strata-{}-{}-{}", ::getpid(), name,
                      std::chrono::steady_clock::now().time_since_epoch().count()))
      .string();
}

/// A cluster of `n` workers on free loopback ports (found by binding port 0; workers retry
/// their rendezvous, so the brief window between close and bind is harmless).
inline cluster::ClusterSpec loopback_cluster(int n) {
  asio::io_context io;
  std::vector<asio::ip::tcp::acceptor> holders;
  cluster::ClusterSpec spec;
  for (int r = 0; r < n; ++r) {
    holders.emplace_back(io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    spec.add({cluster::TaskType::worker, r},
             cluster::Address{"127.0.0.1", holders.back().local_endpoint().port()});
  }
  return spec;
}

/// `workers` workers and `servers` ps tasks on free loopback ports (as loopback_cluster).
inline cluster::ClusterSpec loopback_ps_cluster(int workers, int servers) {
  const auto ports = loopback_cluster(workers + servers);
  cluster::ClusterSpec spec;
  int n = 0;
  for (const auto& [index, address] : ports.tasks(cluster::TaskType::worker)) {
    if (n < workers)
      spec.add({cluster::TaskType::worker, n}, address);
    else
      spec.add({cluster::TaskType::ps, n - workers}, address);
    ++n;
  }
  return spec;
}

/// A chief, `workers` workers and `servers` ps tasks on free loopback ports (as
/// loopback_cluster): a ClusterCoordinator's cluster.
inline cluster::ClusterSpec loopback_coordinator_cluster(int workers, int servers) {
  const auto ports = loopback_cluster(1 + workers + servers);
  cluster::ClusterSpec spec;
  for (const auto& [n, address] : ports.tasks(cluster::TaskType::worker)) {
    if (n == 0)
      spec.add({cluster::TaskType::chief, 0}, address);
    else if (n <= workers)
      spec.add({cluster::TaskType::worker, n - 1}, address);
    else
      spec.add({cluster::TaskType::ps, n - 1 - workers}, address);
  }
  return spec;
}

/// The rest of the line after "`key` " in a worker's output; empty when no line has it.
inline std::string line_after(const std::string& output, std::string_view key) {
  const auto at = output.find(std::string(key) + " ");
  if (at == std::string::npos) return {};
  const auto begin = at + key.size() + 1;
  return output.substr(begin, output.find('\n', begin) - begin);
}

/// One `program scenario...` process per worker of `spec`, each with its TF_CONFIG and the
/// given environment (`per_rank[r]` on top for worker r).
struct Workers {
  Workers(const std::string& program, const cluster::ClusterSpec& spec,
          const std::vector<std::string>& scenario,
          const std::map<std::string, std::string>& extra = {},
          const std::vector<std::map<std::string, std::string>>& per_rank = {}) {
    const auto n = static_cast<int>(spec.num_tasks(cluster::TaskType::worker));
    for (int r = 0; r < n; ++r) {
      auto env = extra;
      env["TF_CONFIG"] = cluster::make_tf_config(spec, {cluster::TaskType::worker, r});
      if (static_cast<std::size_t>(r) < per_rank.size())
        for (const auto& [key, value] : per_rank[static_cast<std::size_t>(r)])
          env[key] = value;
      std::vector<std::string> argv{program};
      argv.insert(argv.end(), scenario.begin(), scenario.end());
      processes.emplace_back(argv, env, temp_path(fmt::format("worker{}", r)));
    }
  }

  /// Waits until every worker has printed `word` (or ended), at most `timeout`.
  bool wait_for_output(std::string_view word, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      bool all = true;
      for (auto& p : processes)
        if (p.output().find(word) == std::string::npos) all = false;
      if (all) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::vector<Process> processes;
};

}  // namespace strata::testing
