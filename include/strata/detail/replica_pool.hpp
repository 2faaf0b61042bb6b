// strata/detail/replica_pool.hpp — the threads that run a strategy's replicas.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::detail {

/// Runs a function once per replica, replica 0 on the calling thread and replica r on a
/// thread kept for it, and returns when all are done. Threads are started once and reused
/// for every step: starting threads per step would cost more than a small all-reduce.
class ReplicaPool {
 public:
  explicit ReplicaPool(int replicas) {
    threads_.reserve(static_cast<std::size_t>(replicas > 1 ? replicas - 1 : 0));
    for (int r = 1; r < replicas; ++r)
      threads_.emplace_back([this, r] { serve(r); });
  }

  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  ~ReplicaPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
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
    {
      std::lock_guard lock(mutex_);
      job_ = &body;
      invoke_ = [](void* job, int replica) { (*static_cast<Body*>(job))(replica); };
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    start_.notify_all();
    body(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void serve(int replica) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      void* job = job_;
      auto* invoke = invoke_;
      lock.unlock();
      invoke(job, replica);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  void* job_ = nullptr;
  void (*invoke_)(void*, int) = nullptr;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::detail
