// strata/communicator/detail/teardown_together.hpp — the ranks of one process in one group,
// destroyed together.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace strata::communicator::detail {

/// Holds the states of one process's ranks of a group as each rank lets go of its own, and
/// destroys them all at once, one thread each, when the last reference goes: for transports
/// whose ranks wait for each other while they are freed (NCCL synchronizes the ranks of a node
/// when it frees a communicator), which one thread destroying them in turn would make wait
/// until their deadline.
template <class State>
class TeardownTogether {
 public:
  explicit TeardownTogether(std::size_t ranks) { states_.reserve(ranks); }
  TeardownTogether(const TeardownTogether&) = delete;
  TeardownTogether& operator=(const TeardownTogether&) = delete;
  ~TeardownTogether() {
    std::vector<std::jthread> threads;
    for (auto& state : states_)
      threads.emplace_back([&state] { state.reset(); });
  }

  /// Takes a rank's state. Never allocates: room for every rank was made up front.
  void adopt(std::unique_ptr<State> state) noexcept {
    std::lock_guard lock(mutex_);
    states_.push_back(std::move(state));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<State>> states_;
};

}  // namespace strata::communicator::detail
