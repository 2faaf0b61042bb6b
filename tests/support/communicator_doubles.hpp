// tests/support/communicator_doubles.hpp — an archetype and test doubles of the Communicator
// concept (strata/communicator/communicator.hpp), STYLE.md item 6.
//
//   LoopbackCommunicator  the minimal model: a group of one whose collectives are the identity
//                         or a copy. `BasicLoopbackCommunicator<ArchetypeDefects{...}>` removes
//                         one requirement at a time, to build near-misses that must not model
//                         the concept (see communicator_test.cpp).
//   FailingCommunicator   every call throws PeerFailureError (asynchronous calls return a Work
//                         that rethrows it): the peer-died path of code under test.
//   StallingCommunicator  every call blocks until its deadline (CallOptions::timeout, else
//                         CommunicatorOptions::timeout), then throws TimeoutError; abort() wakes
//                         every pending call of the group with PeerFailureError: the hung-peer
//                         path of code under test, without a real hung peer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::testing {

namespace detail {

/// A Work that has already completed, with `failure` (or successfully when null).
inline communicator::Work completed_work(std::exception_ptr failure = nullptr) {
  auto state = std::make_shared<communicator::detail::WorkState>();
  state->complete(std::move(failure));
  return communicator::Work(std::move(state));
}

/// Runs `call` now and returns its outcome as a completed Work.
template <class Call>
communicator::Work run_as_work(Call&& call) {
  try {
    std::forward<Call>(call)();
    return completed_work();
  } catch (...) {
    return completed_work(std::current_exception());
  }
}

}  // namespace detail

// ---- the archetype -----------------------------------------------------------------------------

/// Each field set removes one requirement of `Communicator` from `BasicLoopbackCommunicator`.
struct ArchetypeDefects {
  bool no_reduce_scatter_async = false;  // one `_async` twin missing
  bool no_barrier = false;               // barrier() missing (barrier_async() kept)
  bool no_abort = false;                 // abort() missing
  bool float_only = false;               // collectives accept float only
  bool size_t_rank = false;              // rank() returns std::size_t instead of int
};

/// The minimal model of `Communicator`: rank 0 of a group of one. In-place collectives leave the
/// data as it is (one rank's sum, mean, min, ... is its own data); out-of-place ones copy. Spans
/// and roots are validated like every model's (UsageError); `CallOptions` are accepted and
/// unused, since nothing waits. Not thread-safe beyond `abort()`, like the real models.
template <ArchetypeDefects kDefects = ArchetypeDefects{}>
class BasicLoopbackCommunicator {
  template <class T>
  static constexpr bool kSupported = !kDefects.float_only || std::same_as<T, float>;
  using Rank = std::conditional_t<kDefects.size_t_rank, std::size_t, int>;
  using CallOptions = communicator::CallOptions;
  using Work = communicator::Work;

 public:
  static constexpr std::string_view kName = "loopback";

  static std::vector<BasicLoopbackCommunicator> create(int size = 1,
                                                       communicator::CommunicatorOptions = {}) {
    if (size != 1)
      throw UsageError(-1, "BasicLoopbackCommunicator::create",
                       fmt::format("a loopback group has one rank, got size {}", size),
                       "create a group of 1");
    return std::vector<BasicLoopbackCommunicator>(1);
  }

  Rank rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }

  template <Element T>
  requires kSupported<T>
  void all_reduce(std::span<T>, ReduceOp, CallOptions = {}) { check_usable("all_reduce"); }
  template <Element T>
  requires kSupported<T>
  void all_reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp,
                  CallOptions = {}) {
    copy("all_reduce", send, recv);
  }
  template <Element T>
  requires kSupported<T>
  void broadcast(std::span<T>, int root, CallOptions = {}) { check_root("broadcast", root); }
  template <Element T>
  requires kSupported<T>
  void broadcast(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                 CallOptions = {}) {
    check_root("broadcast", root);
    copy("broadcast", send, recv);
  }
  template <Element T>
  requires kSupported<T>
  void reduce(std::span<T>, ReduceOp, int root, CallOptions = {}) { check_root("reduce", root); }
  template <Element T>
  requires kSupported<T>
  void reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp, int root,
              CallOptions = {}) {
    check_root("reduce", root);
    copy("reduce", send, recv);
  }
  template <Element T>
  requires kSupported<T>
  void all_gather(std::span<T>, CallOptions = {}) { check_usable("all_gather"); }
  template <Element T>
  requires kSupported<T>
  void all_gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                  CallOptions = {}) {
    copy("all_gather", send, recv);
  }
  template <Element T>
  requires kSupported<T>
  void reduce_scatter(std::span<T>, ReduceOp, CallOptions = {}) { check_usable("reduce_scatter"); }
  template <Element T>
  requires kSupported<T>
  void reduce_scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp,
                      CallOptions = {}) {
    copy("reduce_scatter", send, recv);
  }

  // The asynchronous twins run at once and return a completed Work.
  template <Element T>
  requires kSupported<T> Work all_reduce_async(std::span<T> data, ReduceOp op,
                                               CallOptions call = {}) {
    return detail::run_as_work([&] { all_reduce(data, op, call); });
  }
  template <Element T>
  requires kSupported<T> Work all_reduce_async(std::span<const std::type_identity_t<T>> send,
                                               std::span<T> recv, ReduceOp op,
                                               CallOptions call = {}) {
    return detail::run_as_work([&] { all_reduce(send, recv, op, call); });
  }
  template <Element T>
  requires kSupported<T> Work broadcast_async(std::span<T> data, int root, CallOptions call = {}) {
    return detail::run_as_work([&] { broadcast(data, root, call); });
  }
  template <Element T>
  requires kSupported<T> Work broadcast_async(std::span<const std::type_identity_t<T>> send,
                                              std::span<T> recv, int root, CallOptions call = {}) {
    return detail::run_as_work([&] { broadcast(send, recv, root, call); });
  }
  template <Element T>
  requires kSupported<T> Work reduce_async(std::span<T> data, ReduceOp op, int root,
                                           CallOptions call = {}) {
    return detail::run_as_work([&] { reduce(data, op, root, call); });
  }
  template <Element T>
  requires kSupported<T> Work reduce_async(std::span<const std::type_identity_t<T>> send,
                                           std::span<T> recv, ReduceOp op, int root,
                                           CallOptions call = {}) {
    return detail::run_as_work([&] { reduce(send, recv, op, root, call); });
  }
  template <Element T>
  requires kSupported<T> Work all_gather_async(std::span<T> data, CallOptions call = {}) {
    return detail::run_as_work([&] { all_gather(data, call); });
  }
  template <Element T>
  requires kSupported<T> Work all_gather_async(std::span<const std::type_identity_t<T>> send,
                                               std::span<T> recv, CallOptions call = {}) {
    return detail::run_as_work([&] { all_gather(send, recv, call); });
  }
  template <Element T>
  requires(kSupported<T> && !kDefects.no_reduce_scatter_async) Work
      reduce_scatter_async(std::span<T> data, ReduceOp op, CallOptions call = {}) {
    return detail::run_as_work([&] { reduce_scatter(data, op, call); });
  }
  template <Element T>
  requires(kSupported<T> && !kDefects.no_reduce_scatter_async) Work
      reduce_scatter_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                           ReduceOp op, CallOptions call = {}) {
    return detail::run_as_work([&] { reduce_scatter(send, recv, op, call); });
  }

  void barrier(CallOptions = {}) requires(!kDefects.no_barrier) { check_usable("barrier"); }
  Work barrier_async(CallOptions = {}) {
    return detail::run_as_work([&] { check_usable("barrier"); });
  }

  /// Fails the group: every later call throws PeerFailureError carrying `reason`.
  void abort(std::string_view reason) noexcept requires(!kDefects.no_abort) {
    aborted_ = std::string(reason);
  }

 private:
  void check_usable(std::string_view operation) const {
    if (!aborted_.empty())
      throw PeerFailureError(0, operation, fmt::format("rank 0 aborted: {}", aborted_));
  }

  void check_root(std::string_view operation, int root) const {
    check_usable(operation);
    if (root != 0)
      throw UsageError(0, operation, fmt::format("root {} is not a rank of this group of 1", root),
                       "pass a root in [0, size())");
  }

  template <class T>
  void copy(std::string_view operation, std::span<const T> send, std::span<T> recv) const {
    check_usable(operation);
    if (recv.size() != send.size())
      throw UsageError(0, operation,
                       fmt::format("recv has {} elements, expected {}", recv.size(), send.size()),
                       "in a group of one every output has the size of the input");
    if (!send.empty() && recv.data() != send.data())
      std::memcpy(static_cast<void*>(recv.data()), send.data(), send.size_bytes());
  }

  std::string aborted_;
};

using LoopbackCommunicator = BasicLoopbackCommunicator<>;

// ---- the failing and the stalling doubles ------------------------------------------------------

namespace detail {

/// Every collective of the Communicator concept, each turned into `Derived::fail(operation,
/// call)`, which throws; the `_async` twins return `Derived::fail_async(operation, call)`.
template <class Derived>
class UniformFailure {
  using CallOptions = communicator::CallOptions;
  using Work = communicator::Work;

 public:
  template <Element T>
  void all_reduce(std::span<T>, ReduceOp, CallOptions call = {}) {
    self().fail("all_reduce", call);
  }
  template <Element T>
  void all_reduce(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp,
                  CallOptions call = {}) {
    self().fail("all_reduce", call);
  }
  template <Element T>
  void broadcast(std::span<T>, int, CallOptions call = {}) {
    self().fail("broadcast", call);
  }
  template <Element T>
  void broadcast(std::span<const std::type_identity_t<T>>, std::span<T>, int,
                 CallOptions call = {}) {
    self().fail("broadcast", call);
  }
  template <Element T>
  void reduce(std::span<T>, ReduceOp, int, CallOptions call = {}) {
    self().fail("reduce", call);
  }
  template <Element T>
  void reduce(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp, int,
              CallOptions call = {}) {
    self().fail("reduce", call);
  }
  template <Element T>
  void all_gather(std::span<T>, CallOptions call = {}) {
    self().fail("all_gather", call);
  }
  template <Element T>
  void all_gather(std::span<const std::type_identity_t<T>>, std::span<T>, CallOptions call = {}) {
    self().fail("all_gather", call);
  }
  template <Element T>
  void reduce_scatter(std::span<T>, ReduceOp, CallOptions call = {}) {
    self().fail("reduce_scatter", call);
  }
  template <Element T>
  void reduce_scatter(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp,
                      CallOptions call = {}) {
    self().fail("reduce_scatter", call);
  }
  void barrier(CallOptions call = {}) { self().fail("barrier", call); }

  template <Element T>
  Work all_reduce_async(std::span<T>, ReduceOp, CallOptions call = {}) {
    return self().fail_async("all_reduce", call);
  }
  template <Element T>
  Work all_reduce_async(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp,
                        CallOptions call = {}) {
    return self().fail_async("all_reduce", call);
  }
  template <Element T>
  Work broadcast_async(std::span<T>, int, CallOptions call = {}) {
    return self().fail_async("broadcast", call);
  }
  template <Element T>
  Work broadcast_async(std::span<const std::type_identity_t<T>>, std::span<T>, int,
                       CallOptions call = {}) {
    return self().fail_async("broadcast", call);
  }
  template <Element T>
  Work reduce_async(std::span<T>, ReduceOp, int, CallOptions call = {}) {
    return self().fail_async("reduce", call);
  }
  template <Element T>
  Work reduce_async(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp, int,
                    CallOptions call = {}) {
    return self().fail_async("reduce", call);
  }
  template <Element T>
  Work all_gather_async(std::span<T>, CallOptions call = {}) {
    return self().fail_async("all_gather", call);
  }
  template <Element T>
  Work all_gather_async(std::span<const std::type_identity_t<T>>, std::span<T>,
                        CallOptions call = {}) {
    return self().fail_async("all_gather", call);
  }
  template <Element T>
  Work reduce_scatter_async(std::span<T>, ReduceOp, CallOptions call = {}) {
    return self().fail_async("reduce_scatter", call);
  }
  template <Element T>
  Work reduce_scatter_async(std::span<const std::type_identity_t<T>>, std::span<T>, ReduceOp,
                            CallOptions call = {}) {
    return self().fail_async("reduce_scatter", call);
  }
  Work barrier_async(CallOptions call = {}) { return self().fail_async("barrier", call); }

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
};

}  // namespace detail

/// Rank r of a group whose every call throws PeerFailureError at once, as if a peer had died;
/// asynchronous calls return a Work that rethrows it from wait() and test().
class FailingCommunicator : public detail::UniformFailure<FailingCommunicator> {
 public:
  static constexpr std::string_view kName = "failing";

  static std::vector<FailingCommunicator> create(int size = 1,
                                                 communicator::CommunicatorOptions = {}) {
    std::vector<FailingCommunicator> group;
    for (int r = 0; r < size; ++r)
      group.push_back(FailingCommunicator(r, size));
    return group;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  void abort(std::string_view) noexcept {}

  [[noreturn]] void fail(std::string_view operation, const communicator::CallOptions&) const {
    throw error(operation);
  }
  communicator::Work fail_async(std::string_view operation,
                                const communicator::CallOptions&) const {
    return detail::completed_work(std::make_exception_ptr(error(operation)));
  }

 private:
  FailingCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  PeerFailureError error(std::string_view operation) const {
    return PeerFailureError(rank_, operation,
                            fmt::format("injected failure: a peer of rank {} died", rank_));
  }

  int rank_;
  int size_;
};

/// Rank r of a group whose every call blocks until its deadline and then throws TimeoutError,
/// as if a peer had stalled. `abort()` on any rank wakes every pending call of the group with
/// PeerFailureError, and later calls throw it at once. Asynchronous calls wait on a thread of
/// their own; destroying the communicator waits for them (at most until their deadlines).
class StallingCommunicator : public detail::UniformFailure<StallingCommunicator> {
  struct Group {
    std::mutex mutex;
    std::condition_variable aborted_cv;
    std::string abort_reason;  // empty until aborted
    bool aborted = false;
    communicator::CommunicatorOptions options;
  };

 public:
  static constexpr std::string_view kName = "stalling";

  static std::vector<StallingCommunicator> create(int size = 1,
                                                  communicator::CommunicatorOptions options = {}) {
    auto group = std::make_shared<Group>();
    group->options = options;
    std::vector<StallingCommunicator> ranks;
    for (int r = 0; r < size; ++r)
      ranks.push_back(StallingCommunicator(group, r, size));
    return ranks;
  }

  StallingCommunicator(StallingCommunicator&&) noexcept = default;
  StallingCommunicator& operator=(StallingCommunicator&&) noexcept = default;
  ~StallingCommunicator() = default;  // `threads_` joins the asynchronous waits

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }

  void abort(std::string_view reason) noexcept {
    {
      std::lock_guard lock(group_->mutex);
      if (group_->aborted) return;
      group_->aborted = true;
      group_->abort_reason = fmt::format("rank {} aborted: {}", rank_, reason);
    }
    group_->aborted_cv.notify_all();
  }

  [[noreturn]] void fail(std::string_view operation, const communicator::CallOptions& call) const {
    std::rethrow_exception(stall(operation, deadline_of(call), group_, rank_));
  }

  communicator::Work fail_async(std::string_view operation, const communicator::CallOptions& call) {
    auto state = std::make_shared<communicator::detail::WorkState>();
    threads_->emplace_back(
        [state, operation, deadline = deadline_of(call), group = group_, rank = rank_] {
          state->complete(stall(operation, deadline, group, rank));
        });
    return communicator::Work(state);
  }

 private:
  StallingCommunicator(std::shared_ptr<Group> group, int rank, int size)
      : group_(std::move(group)),
        rank_(rank),
        size_(size),
        threads_(std::make_unique<std::vector<std::jthread>>()) {}

  Deadline deadline_of(const communicator::CallOptions& call) const {
    return Deadline::after(call.timeout.value_or(group_->options.timeout));
  }

  // Waits until the deadline or an abort; returns the error the call ends with.
  static std::exception_ptr stall(std::string_view operation, const Deadline& deadline,
                                  const std::shared_ptr<Group>& group, int rank) {
    std::unique_lock lock(group->mutex);
    if (group->aborted_cv.wait_until(lock, deadline.time_point(), [&] { return group->aborted; }))
      return std::make_exception_ptr(PeerFailureError(
          rank, operation, fmt::format("the group failed: {}", group->abort_reason)));
    return std::make_exception_ptr(TimeoutError(
        rank, operation,
        fmt::format("timed out after {} ms: the stalling double never completes a call",
                    deadline.budget().count())));
  }

  std::shared_ptr<Group> group_;
  int rank_;
  int size_;
  std::unique_ptr<std::vector<std::jthread>> threads_;  // stable across moves
};

}  // namespace strata::testing
