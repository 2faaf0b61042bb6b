// tests/support/rank_team.hpp — the ranks of one group of an in-process communicator, each
// driven by its own persistent thread (rank 0 by the calling thread), so that thousands of
// conformance cases do not start thousands of threads.
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <strata/communicator/options.hpp>

namespace strata::testing {

/// Creates the ranks of one group of `size` ranks. A runtime value rather than a type, so that
/// differently tuned groups of one communicator type share one instantiation of the runner.
template <class Comm>
using GroupFactory =
    std::function<std::vector<Comm>(int size, const communicator::CommunicatorOptions&)>;

/// `Comm::create(size, options)`.
template <class Comm>
GroupFactory<Comm> created_by_comm() {
  return [](int size, const communicator::CommunicatorOptions& options) {
    return Comm::create(size, options);
  };
}

/// The ranks of one group of `Comm`, made by `create` (by default `Comm::create(size, options)`),
/// each driven by a thread kept for the team's lifetime: rank 0 by the thread that calls `run`,
/// rank r > 0 by a helper thread.
template <class Comm>
class RankTeam {
 public:
  explicit RankTeam(int size, communicator::CommunicatorOptions options = {},
                    GroupFactory<Comm> create = created_by_comm<Comm>())
      : size_(size),
        options_(options),
        create_(std::move(create)),
        group_(create_(size, options)),
        barrier_(size) {
    for (int r = 1; r < size; ++r)
      helpers_.emplace_back([this, r] { serve(r); });
  }
  RankTeam(const RankTeam&) = delete;
  RankTeam& operator=(const RankTeam&) = delete;
  ~RankTeam() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (auto& helper : helpers_)
      helper.join();
  }

  int size() const noexcept { return size_; }
  Comm& operator[](int rank) { return group_[static_cast<std::size_t>(rank)]; }
  std::vector<Comm>& group() noexcept { return group_; }

  /// Runs `body(rank)` on every rank at once and waits for all; returns what each rank threw
  /// (null where it returned). Bodies may meet at `arrive_and_wait()`.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& body) {
    {
      std::lock_guard lock(mutex_);
      job_ = &body;
      failures_.assign(static_cast<std::size_t>(size_), nullptr);
      pending_ = size_ - 1;
      ++generation_;
    }
    start_.notify_all();
    run_one(0, body);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    return failures_;
  }

  /// Runs `body(rank)` on every rank and rethrows the first rank's exception, if any.
  void run_or_throw(const std::function<void(int)>& body) {
    for (auto& failure : run(body))
      if (failure) std::rethrow_exception(failure);
  }

  /// A barrier of the team's threads (not of the communicator), for bodies that have phases.
  void arrive_and_wait() { barrier_.arrive_and_wait(); }

  /// Replaces the group by a fresh one, e.g. after a failure has poisoned it.
  void reset() { group_ = create_(size_, options_); }

 private:
  void run_one(int rank, const std::function<void(int)>& body) {
    std::exception_ptr failure;
    try {
      body(rank);
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    failures_[static_cast<std::size_t>(rank)] = failure;
  }

  void serve(int rank) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      run_one(rank, *job);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  int size_;
  communicator::CommunicatorOptions options_;
  GroupFactory<Comm> create_;
  std::vector<Comm> group_;
  std::barrier<> barrier_;
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  std::vector<std::exception_ptr> failures_;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace strata::testing
