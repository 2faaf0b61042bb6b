// strata/communicator/work.hpp — the handle of an asynchronous collective.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include <strata/core/error.hpp>

namespace strata::communicator {

namespace detail {

/// Completion state shared by a `Work` handle and the thread that runs the collective.
class WorkState {
 public:
  void complete(std::exception_ptr failure = nullptr) noexcept {
    {
      std::lock_guard lock(mutex_);
      failure_ = std::move(failure);
      done_ = true;
    }
    done_cv_.notify_all();
  }

  bool test() {
    std::lock_guard lock(mutex_);
    if (done_ && failure_) std::rethrow_exception(failure_);
    return done_;
  }

  void wait() {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr failure_;
};

}  // namespace detail

/// Handle of a collective started with one of the `*_async` calls.
///
/// The buffers handed to the call belong to the collective until `wait()` returns or `test()`
/// returns true: do not read the output or touch the input before that.
///
/// `wait()` needs no deadline of its own: the collective it waits for runs under the
/// communicator's deadline and completes (successfully or with an error) by then.
///
/// @throws the collective's error (`TimeoutError`, `PeerFailureError`, `MismatchError`) from
/// `wait()`, and from `test()` once it has completed. Invalid arguments (span sizes, root) are
/// caught before the call is queued: the `*_async` call itself throws `UsageError`.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) noexcept : state_(std::move(state)) {}

  /// True once the collective has completed; never blocks. Rethrows its error, if any.
  bool test() { return !state_ || state_->test(); }
  /// Blocks until the collective has completed; rethrows its error, if any.
  void wait() {
    if (state_) state_->wait();
  }
  /// False for a default-constructed handle.
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace strata::communicator
