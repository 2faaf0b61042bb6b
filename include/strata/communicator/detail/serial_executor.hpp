// strata/communicator/detail/serial_executor.hpp — one background thread running tasks in order.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <strata/communicator/work.hpp>

namespace strata::communicator::detail {

/// Runs posted tasks one after another on a thread it starts on first use. Asynchronous
/// collectives of one rank run here, in call order; a synchronous call first `drain()`s, so
/// the rank's collectives keep the order the caller issued them in.
class SerialExecutor {
 public:
  SerialExecutor() = default;
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  ~SerialExecutor() {
    {
      std::unique_lock lock(mutex_);
      idle_.wait(lock, [&] { return queue_.empty() && !running_; });
      stopping_ = true;
    }
    work_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  /// Queues `task`; it must not throw (tasks report through their `Work`).
  void post(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    work_.notify_one();
  }

  /// Queues `run` and returns the Work that completes once it has run, with its exception if it
  /// threw: how every communicator runs its asynchronous collectives.
  template <class Run>
  Work submit(Run run) {
    auto work = std::make_shared<WorkState>();
    post([work, run = std::move(run)] {
      try {
        run();
        work->complete();
      } catch (...) {
        work->complete(std::current_exception());
      }
    });
    return Work(std::move(work));
  }

  /// Blocks until every posted task has finished. Bounded: each task is a collective that ends
  /// by its own deadline.
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !running_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left
      auto task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lock.unlock();
      task();
      lock.lock();
      running_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::communicator::detail
