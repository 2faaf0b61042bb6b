// strata/transport/local/group.hpp — the shared state of one in-process group: where its threads
// meet.
//
// The local transport moves no bytes: replicas share an address space, so algorithms read
// their peers' buffers directly. What it provides is the meeting: every rank posts the
// description of its call, then all ranks pass synchronization points together. It also
// holds the group's first failure, so that one rank's timeout, mismatch or abort wakes every
// other rank at once (fail fast) instead of leaving them to wait for their own deadlines.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/detail/spin_wait.hpp>

namespace strata::transport::local {

/// Shared state of one in-process group of `size` ranks.
///
/// Thread safety: each rank is driven by one thread at a time; different ranks call
/// concurrently. `fail()` may be called from any thread.
class Group {
 public:
  explicit Group(int size) : size_(size), arrivals_(static_cast<std::size_t>(size)) {
    for (auto& slots : calls_)
      slots.resize(static_cast<std::size_t>(size));
    for (auto& arrival : arrivals_)
      arrival.store(0, std::memory_order_relaxed);
  }

  int size() const noexcept { return size_; }

  /// The call slot of `rank` for round `round`. Rounds alternate between two slot sets, so a
  /// rank that has finished round k may post round k+1 while slower ranks still read round k;
  /// it cannot get further ahead, because round k+1 needs every rank to arrive.
  CollectiveCall& call(std::uint64_t round, int rank) noexcept {
    return calls_[round & 1u][static_cast<std::size_t>(rank)];
  }

  /// Blocks until every rank has arrived at this synchronization point (all ranks pass the
  /// same sequence of points), the deadline expires, or the group fails.
  ///
  /// With `opens_transfer`, releasing the point also registers every rank as working on its
  /// peers' buffers (atomically with the release, so no rank can leave before the others are
  /// counted); each rank then calls `end_transfer` exactly once — this function does it itself
  /// when it throws after such a release.
  ///
  /// Waiting spins briefly (a collective's partners usually arrive within microseconds), then
  /// yields, then sleeps on a condition variable, so waiting replicas do not hold a core.
  /// @throws TimeoutError naming the ranks that have not arrived; the group fails with it.
  /// @throws the group's failure, re-raised for this rank (see `raise_failure`).
  void arrive_and_wait(int rank, const Deadline& deadline, std::string_view operation,
                       bool opens_transfer = false) {
    const std::uint64_t generation = generation_.load(std::memory_order_acquire);
    arrivals_[static_cast<std::size_t>(rank)].store(generation + 1, std::memory_order_relaxed);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      bool failed = false;
      {
        // Under the mutex: a rank that timed out here has either failed the group already
        // (we see it and raise) or has not yet decided (it will see the new generation).
        std::lock_guard lock(mutex_);
        failed = failure_ != nullptr;
        if (opens_transfer && !failed) {
          in_transfer_.fetch_add(size_, std::memory_order_acq_rel);
          transfer_generation_ = generation + 1;
        }
        generation_.store(generation + 1, std::memory_order_release);
      }
      wake_.notify_all();
      if (failed) raise_failure(rank, operation);
      return;
    }
    wait_for_generation(rank, generation, deadline, operation);
    if (!failed_.load(std::memory_order_acquire)) return;
    if (opens_transfer) {
      bool opened = false;
      {
        std::lock_guard lock(mutex_);
        opened = transfer_generation_ == generation + 1;
      }
      // Peers may already be working on this rank's buffers: wait for them to stop.
      if (opened) end_transfer(/*failed=*/true);
    }
    raise_failure(rank, operation);
  }

  /// Ends the transfer an `opens_transfer` point began for this rank. After a failure, waits
  /// until no rank is still working on buffers of the failed call, so that none of them can
  /// touch this rank's buffers after it returns to its caller. That wait is short and bounded:
  /// transfer phases never block except at synchronization points, and those fail at once
  /// once the group has failed.
  void end_transfer(bool failed) noexcept {
    if (in_transfer_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      { std::lock_guard lock(mutex_); }
      wake_.notify_all();
    }
    if (!failed) return;
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return in_transfer_.load(std::memory_order_acquire) == 0; });
  }

  /// Fails the group with `failure` unless it has failed already (the first failure wins) and
  /// wakes every waiting rank. Later calls on any rank re-raise it.
  void fail(std::exception_ptr failure) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (failure_) return;
      failure_ = std::move(failure);
      failed_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
  }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  /// Throws the group's first failure as seen from `rank` in `operation`: a timeout stays a
  /// `TimeoutError` and a mismatch a `MismatchError` on every rank, anything else becomes a
  /// `PeerFailureError`; each names the failure's root cause.
  [[noreturn]] void raise_failure(int rank, std::string_view operation) const {
    std::exception_ptr failure;
    {
      std::lock_guard lock(mutex_);
      failure = failure_;
    }
    try {
      std::rethrow_exception(failure);
    } catch (const Error& error) {
      if (error.rank() == rank && error.operation() == operation) throw;  // our own, as raised
    } catch (...) {
    }
    raise_root_cause(failure, rank, operation);
  }

 private:
  void wait_for_generation(int rank, std::uint64_t generation, const Deadline& deadline,
                           std::string_view operation) {
    auto released = [&] {
      return generation_.load(std::memory_order_acquire) != generation ||
             failed_.load(std::memory_order_acquire);
    };
    if (spin_.poll(released)) return;
    std::unique_lock lock(mutex_);
    if (wake_.wait_until(lock, deadline.time_point(), released)) return;
    // Still under the mutex, so no rank can release this point while we fail the group.
    if (failure_) return;
    failure_ = std::make_exception_ptr(
        TimeoutError(rank, operation,
                     fmt::format("timed out after {} ms waiting for {} to reach the same call",
                                 deadline.budget().count(), missing_ranks(generation))));
    failed_.store(true, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
  }

  std::string missing_ranks(std::uint64_t generation) const {
    std::string ranks;
    int missing = 0;
    for (int r = 0; r < size_; ++r) {
      if (arrivals_[static_cast<std::size_t>(r)].load(std::memory_order_relaxed) > generation)
        continue;
      ranks += fmt::format("{}{}", missing++ ? ", " : "", r);
    }
    return fmt::format("rank{} {} (of {})", missing == 1 ? "" : "s", ranks, size_);
  }

  const int size_;
  const strata::detail::SpinPolicy spin_ = strata::detail::SpinPolicy::for_threads(size_);
  std::array<std::vector<CollectiveCall>, 2> calls_;
  std::vector<std::atomic<std::uint64_t>> arrivals_;  // per rank: last generation reached + 1
  std::atomic<int> arrived_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> failed_{false};
  std::atomic<int> in_transfer_{0};
  std::uint64_t transfer_generation_ = 0;  // guarded by mutex_
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::exception_ptr failure_;
};

}  // namespace strata::transport::local
