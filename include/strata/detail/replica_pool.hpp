// strata/detail/replica_pool.hpp — the threads that run a strategy's replicas.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include <strata/detail/spin_wait.hpp>

namespace strata::detail {

/// Runs a function once per replica, replica 0 on the calling thread and replica r on a
/// thread kept for it, and returns when all are done. Threads are started once and reused
/// for every step: starting threads per step would cost more than a small all-reduce. Both
/// ends poll briefly before they block (SpinPolicy): a training loop calls run() step after
/// step, and a futex wake-up per step would cost more than a 1 MiB in-process all-reduce.
class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas) : spin_(SpinPolicy::for_threads(replicas)) {
    threads_.reserve(static_cast<std::size_t>(replicas > 1 ? replicas - 1 : 0));
    for (int r = 1; r < replicas; ++r)
      threads_.emplace_back([this, r] { serve(r); });
  }

  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  ~ReplicaPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_.store(true, std::memory_order_release);
    }
    start_.notify_all();
    for (auto& thread : threads_)
      thread.join();
  }

  int size() const noexcept { return static_cast<int>(threads_.size()) + 1; }

  /// Calls `body(r)` for every replica r and waits for all of them. `body` must not throw:
  /// the caller catches per replica (a replica's exception must not skip the wait).
  template <class Body>
  void run(Body& body) {
    if (threads_.empty()) {
      body(0);
      return;
    }
    {
      std::lock_guard lock(mutex_);
      job_ = &body;
      invoke_ = [](void* job, int replica) { (*static_cast<Body*>(job))(replica); };
      pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    body(0);
    auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!spin_.poll(all_done)) {
      std::unique_lock lock(mutex_);
      done_.wait(lock, all_done);
    }
  }

 private:
  void serve(int replica) {
    std::uint64_t seen = 0;
    auto started = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      if (!spin_.poll(started)) {
        std::unique_lock lock(mutex_);
        start_.wait(lock, started);
      }
      if (stopping_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      invoke_(job_, replica);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Under the mutex, so the caller cannot check pending_ and then miss this notify.
        std::lock_guard lock(mutex_);
        done_.notify_one();
      }
    }
  }

  const SpinPolicy spin_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  // Written by run() before generation_ is bumped (release), read by workers after they see
  // the new generation (acquire); run() returns only when every worker has finished with them.
  void* job_ = nullptr;
  void (*invoke_)(void*, int) = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace strata::detail
