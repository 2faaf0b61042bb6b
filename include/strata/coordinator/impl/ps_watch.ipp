// strata/coordinator/impl/ps_watch.ipp — the coordinator's connections to every ps task, which
// say when one closes: a ps task never speaks first, so anything readable there means it died
// or stopped serving.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/transport/tcp/service_client.hpp>

namespace strata::coordinator::detail {

class PsWatch {
 public:
  PsWatch(const cluster::ClusterSpec& cluster, int rank, std::optional<std::string> token,
          std::uint64_t incarnation)
      : mine_{ps::ps_fingerprint(cluster), ps::kTunables, cluster.collective_size(), rank,
              std::move(token)},
        incarnation_(incarnation) {
    for (const auto& [index, address] : cluster.tasks(cluster::TaskType::ps))
      tasks_.push_back({index, address, nullptr});
  }

  bool empty() const noexcept { return tasks_.empty(); }

  /// Connects to every ps task by `until`, asking `stopping()` between attempts; false when it
  /// said to stop.
  /// @throws ConfigurationError when a ps task refuses the coordinator; TimeoutError naming
  ///   one that cannot be reached by `until`.
  template <class Stopping>
  bool connect(Clock::time_point until, std::chrono::milliseconds budget, Stopping stopping) {
    for (auto& task : tasks_) {
      std::string why = "no attempt was made";
      while (!task.link) {
        if (stopping()) return false;
        task.link = transport::tcp::ServiceConnection::connect(
            task.address, mine_, task.index, kWatchLane, incarnation_, until, "ClusterCoordinator",
            who(task), why);
        if (task.link) break;
        if (Clock::now() >= until)
          throw TimeoutError(mine_.rank, "ClusterCoordinator",
                             fmt::format("could not connect to {} within {} ms (last attempt: {})",
                                         who(task), budget.count(), why),
                             "check that the ps task is running with the same cluster spec, or "
                             "raise CoordinatorOptions::timeout");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    for (auto& task : tasks_)
      fds_.push_back({task.link->native_handle(), POLLIN | POLLRDHUP, 0});
    return true;
  }

  /// Waits up to `interval` and returns a PeerFailureError for each ps task whose connection
  /// closed since the last call (each one once).
  std::vector<std::exception_ptr> wait(std::chrono::milliseconds interval) {
    std::vector<std::exception_ptr> failures;
    if (::poll(fds_.data(), fds_.size(), static_cast<int>(interval.count())) <= 0) return failures;
    for (std::size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i].fd < 0 || fds_[i].revents == 0) continue;
      fds_[i].fd = -1;  // poll(2) skips it from now on
      failures.push_back(std::make_exception_ptr(PeerFailureError(
          mine_.rank, "ClusterCoordinator",
          fmt::format("{} closed its connection: the parameter server died or stopped serving",
                      who(tasks_[i])),
          "the variables on that ps task are gone: restart the job and restore from the last "
          "checkpoint")));
    }
    return failures;
  }

 private:
  struct Task {
    int index;
    cluster::Address address;
    std::unique_ptr<transport::tcp::ServiceConnection> link;
  };

  static std::string who(const Task& task) {
    return fmt::format("ps task {} ({})", task.index, task.address.to_string());
  }

  // The watch connection's lane, apart from the lanes of the chief's own ps client.
  static constexpr std::uint16_t kWatchLane = 0xFFFF;

  transport::tcp::ServiceIdentity mine_;
  std::uint64_t incarnation_;
  std::vector<Task> tasks_;
  std::vector<pollfd> fds_;
};

}  // namespace strata::coordinator::detail
