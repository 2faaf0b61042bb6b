// strata/coordinator/impl/coordinator_core.ipp — what a ClusterCoordinator runs
// (coordinator/cluster_coordinator.hpp): the queue, the errors, and the threads.
//
// One thread per worker connects to it (again and again, should it fail), builds the per-worker
// resources on it, then takes functions from the queue and runs them there one at a time, over
// the workers' TCP service (worker_server.hpp). A function whose worker is lost goes back to the
// front of the queue (worker_link.ipp: one connection's requests). One more thread watches the
// ps tasks (ps_watch.ipp).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/impl/ps_watch.ipp>
#include <strata/coordinator/impl/worker_link.ipp>
#include <strata/coordinator/protocol.hpp>
#include <strata/core/detail/join.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/handshake.hpp>

namespace strata::coordinator::detail {

/// How often the ps tasks' connections are polled: a ps failure is raised within this.
inline constexpr std::chrono::milliseconds kPsWatchInterval{100};
/// The longest pause between attempts to reach a worker that is down.
inline constexpr std::chrono::milliseconds kReconnectPause{500};

enum class Phase : std::uint8_t { queued, running, succeeded, failed };

// Guarded by the core's mutex, except the fields set at creation.
struct ClosureState {
  std::shared_ptr<CoordinatorCore> core;
  std::uint64_t id = 0;
  std::string name;
  std::uint64_t signature = 0;
  std::vector<std::byte> args;
  Phase phase = Phase::queued;
  int attempts = 0;
  std::vector<std::byte> result;
  std::exception_ptr error;
};

class CoordinatorCore : public std::enable_shared_from_this<CoordinatorCore> {
  using Reply = WorkerReply;

 public:
  CoordinatorCore(const cluster::ClusterSpec& spec, CoordinatorOptions opts)
      : cluster_(validated(spec, opts)),
        options_(std::move(opts)),
        token_(options_.cluster_token ? options_.cluster_token
                                      : environment_variable("STRATA_CLUSTER_TOKEN")),
        rank_(*cluster_.collective_rank({cluster::TaskType::chief, 0})),
        capacity_(options_.queue_capacity != 0
                      ? options_.queue_capacity
                      : 256 * cluster_.num_tasks(cluster::TaskType::worker)),
        incarnation_(random_incarnation()),
        ps_watch_(cluster_, rank_, token_, incarnation_) {
    if (token_ && token_->empty())
      throw ConfigurationError(rank_, "ClusterCoordinator", "the cluster token is empty",
                               "set a secret shared by every task, or leave it unset");
    for (const auto& [index, address] : cluster_.tasks(cluster::TaskType::worker))
      workers_.push_back(
          std::make_unique<WorkerSlot>(WorkerSlot{index, address, {}, false, false}));
    last_progress_ = Clock::now();
  }

  void start() {
    for (auto& slot : workers_)
      slot->thread = std::thread([this, worker = slot.get()] { serve_worker(*worker); });
    if (!ps_watch_.empty()) ps_thread_ = std::thread([this] { watch_ps(); });
  }

  // ---- the caller's side ---------------------------------------------------------------------

  std::shared_ptr<const ClosureState> schedule(std::string_view name, std::uint64_t signature,
                                               std::vector<std::byte> args) {
    std::unique_lock lock(mutex_);
    raise_pending_error();
    const auto until = Clock::now() + options_.timeout;
    for (;;) {
      if (closing_)
        throw UsageError(rank_, "ClusterCoordinator::schedule", "the coordinator has shut down",
                         "schedule before shutdown()");
      if (queue_.size() < capacity_) break;
      if (progress_.wait_until(lock, until) == std::cv_status::timeout &&
          queue_.size() >= capacity_)
        throw TimeoutError(rank_, "ClusterCoordinator::schedule",
                           fmt::format("the queue stayed full ({} functions) for {} ms; {}",
                                       capacity_, options_.timeout.count(), workers_state()),
                           "check the workers named, or raise CoordinatorOptions::timeout");
      raise_pending_error();
    }
    auto closure = std::make_shared<ClosureState>();
    closure->core = shared_from_this();
    closure->id = next_closure_++;
    closure->name = name;
    closure->signature = signature;
    closure->args = std::move(args);
    queue_.push_back(closure);
    ++unfinished_;
    ++report_.scheduled;
    work_.notify_all();
    return closure;
  }

  std::uint64_t add_resource(std::string_view name, std::uint64_t signature,
                             std::vector<std::byte> args) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = resources_.size() + 1;
    resources_.push_back({id, std::string(name), signature, std::move(args)});
    work_.notify_all();
    return id;
  }

  void join() {
    std::unique_lock lock(mutex_);
    for (;;) {
      raise_pending_error();
      if (unfinished_ == 0) return;
      wait_for_progress(lock, "ClusterCoordinator::join");
    }
  }

  bool done() {
    std::lock_guard lock(mutex_);
    raise_pending_error();
    return unfinished_ == 0;
  }

  std::span<const std::byte> result(const ClosureState& closure) {
    std::unique_lock lock(mutex_);
    while (closure.phase == Phase::queued || closure.phase == Phase::running)
      wait_for_progress(lock, fmt::format("RemoteValue<{}>::fetch", closure.name));
    if (closure.phase == Phase::failed) std::rethrow_exception(closure.error);
    return closure.result;
  }

  bool finished(const ClosureState& closure) {
    std::lock_guard lock(mutex_);
    return closure.phase == Phase::succeeded || closure.phase == Phase::failed;
  }

  void shutdown() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || closing_) return;
      closing_ = true;
    }
    // The ps watch looks once more before any worker is told to finish: a ps task that died
    // just before (its workers' functions raised it first) aborts every worker instead.
    if (ps_thread_.joinable()) ps_thread_.join();
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      cancel_queued("the coordinator shut down");
      work_.notify_all();
      progress_.notify_all();
    }
    for (auto& slot : workers_)
      if (slot->thread.joinable()) slot->thread.join();
  }

  int num_workers() const noexcept { return static_cast<int>(workers_.size()); }

  CoordinatorReport report() const {
    std::lock_guard lock(mutex_);
    return report_;
  }

 private:
  struct WorkerSlot {
    int index;
    cluster::Address address;
    std::thread thread;
    bool connected;
    bool refused;  // by its handshake: retrying cannot help
  };
  struct Resource {
    std::uint64_t id;
    std::string name;
    std::uint64_t signature;
    std::vector<std::byte> args;
  };
  static const cluster::ClusterSpec& validated(const cluster::ClusterSpec& spec,
                                               const CoordinatorOptions& options) {
    if (!spec.has_chief())
      throw ConfigurationError(-1, "ClusterCoordinator", "the cluster has no chief task",
                               "add a chief to the cluster spec (TF_CONFIG \"chief\"), or "
                               "strata-launch --chief; the coordinator runs there");
    if (spec.num_tasks(cluster::TaskType::worker) == 0)
      throw ConfigurationError(0, "ClusterCoordinator", "the cluster has no worker task",
                               "add the workers to the cluster spec (TF_CONFIG \"worker\")");
    if (options.timeout <= std::chrono::milliseconds::zero() ||
        options.closure_timeout <= std::chrono::milliseconds::zero())
      throw UsageError(0, "ClusterCoordinator", "a timeout that is not positive",
                       "pass positive CoordinatorOptions::timeout and closure_timeout");
    return spec;
  }

  std::string who(const WorkerSlot& slot) const {
    return fmt::format("worker {} ({})", slot.index, slot.address.to_string());
  }

  // ---- errors and progress (the mutex held) --------------------------------------------------

  void raise_pending_error() {
    if (!error_) return;
    auto error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }

  // Records the first error since the last one raised; the queued functions are cancelled.
  void record_error(std::exception_ptr error, std::string_view why) {
    if (!error_) error_ = std::move(error);
    cancel_queued(why);
    note_progress();
  }

  void cancel_queued(std::string_view why) {
    while (!queue_.empty()) {
      auto closure = std::move(queue_.front());
      queue_.pop_front();
      closure->phase = Phase::failed;
      closure->error = std::make_exception_ptr(CancelledError(
          rank_, fmt::format("function '{}'", closure->name),
          fmt::format("cancelled before it ran: {}", why),
          "handle the error the coordinator raised (join, done or schedule), then schedule "
          "again"));
      --unfinished_;
      ++report_.cancelled;
    }
  }

  void note_progress() {
    last_progress_ = Clock::now();
    progress_.notify_all();
  }

  // When a wait for a function may give up: closure_timeout after the last progress, and not
  // before the function sent last has had its closure_timeout to answer or to be queued again
  // for another worker (with a little grace for its thread to do so). Otherwise a wait whose
  // only pending function went to a worker that stopped gave up just as the retry began.
  Clock::time_point give_up_at() const {
    const auto grace = std::min(options_.closure_timeout / 10, std::chrono::milliseconds(1000));
    return std::max(last_progress_ + options_.closure_timeout,
                    last_sent_ + options_.closure_timeout + grace);
  }

  void wait_for_progress(std::unique_lock<std::mutex>& lock, std::string_view operation) {
    if (progress_.wait_until(lock, give_up_at()) == std::cv_status::timeout &&
        Clock::now() >= give_up_at())
      throw TimeoutError(
          rank_, operation,
          fmt::format("no scheduled function finished for {} ms; {} pending; {}",
                      options_.closure_timeout.count(), unfinished_, workers_state()),
          "restart the workers that are down or stopped, or raise "
          "CoordinatorOptions::closure_timeout");
  }

  std::string workers_state() const {
    std::vector<std::string> states;
    for (const auto& slot : workers_)
      states.push_back(fmt::format("{} {}", who(*slot),
                                   slot->refused     ? "refused this coordinator"
                                   : slot->connected ? "connected"
                                                     : "down"));
    return strata::detail::join(states, ", ");
  }

  // ---- one worker ----------------------------------------------------------------------------

  void serve_worker(WorkerSlot& slot) {
    std::unique_ptr<WorkerLink> link;
    std::size_t built = 0;
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      if (!link) {
        {
          std::lock_guard lock(mutex_);
          if (stopping_) return;
        }
        link = connect(slot);
        if (slot.refused) return;
        if (!link) {
          std::unique_lock lock(mutex_);
          work_.wait_for(lock, pause, [&] { return stopping_; });
          pause = std::min(pause * 2, kReconnectPause);
          continue;
        }
        pause = std::chrono::milliseconds(10);
        built = 0;
        std::lock_guard lock(mutex_);
        slot.connected = true;
        ++report_.connections;
        note_progress();
      }
      std::shared_ptr<ClosureState> closure;
      const Resource* resource = nullptr;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] {
          return aborted_ || stopping_ || built < resources_.size() || !queue_.empty();
        });
        if (aborted_) {
          abort_worker(*link, aborted_, lock);
          return;
        }
        if (stopping_) break;
        if (built < resources_.size()) {
          resource = &resources_[built];  // a deque: stays where it is
        } else {
          closure = std::move(queue_.front());
          queue_.pop_front();
          closure->phase = Phase::running;
          last_sent_ = Clock::now();
          if (++closure->attempts > 1) ++report_.retried;
          progress_.notify_all();  // room in the queue
        }
      }
      Reply reply =
          resource != nullptr
              ? link->call(Operation::build,
                           {resource->signature, resource->id, incarnation_, resource->name},
                           resource->args, options_.timeout, options_.closure_timeout)
              : link->call(Operation::run,
                           {closure->signature, closure->id, incarnation_, closure->name},
                           closure->args, options_.timeout, options_.closure_timeout);
      std::lock_guard lock(mutex_);
      if (reply.kind == Reply::Kind::lost) {
        link.reset();
        slot.connected = false;
        ++report_.worker_failures;
        if (closure) {
          closure->phase = Phase::queued;
          queue_.push_front(std::move(closure));
          if (stopping_)
            cancel_queued(fmt::format("the coordinator shut down after {} was lost: {}", who(slot),
                                      reply.why));
          else
            work_.notify_all();
        }
        note_progress();
        continue;
      }
      if (resource != nullptr) {
        ++built;
        if (reply.kind == Reply::Kind::error)
          record_error(remote_error(reply, resource->name, slot),
                       fmt::format("building resource '{}' failed", resource->name));
        continue;
      }
      --unfinished_;
      if (reply.kind == Reply::Kind::ok) {
        closure->result = std::move(reply.bytes);
        closure->phase = Phase::succeeded;
        ++report_.succeeded;
        note_progress();
      } else {
        closure->error = remote_error(reply, closure->name, slot);
        closure->phase = Phase::failed;
        ++report_.failed;
        // An exception object of its own: the caller's thread may rethrow and drop one while
        // this thread drops the other, and the runtime's count of an exception's owners is no
        // synchronization (ThreadSanitizer cannot see it).
        record_error(remote_error(reply, closure->name, slot),
                     fmt::format("function '{}' failed", closure->name));
      }
    }
    // Shutting down: the worker's server returns, and its resources are destroyed.
    (void)link->call(Operation::done, {}, {}, options_.timeout, options_.closure_timeout);
  }

  std::exception_ptr remote_error(const Reply& reply, std::string_view function,
                                  const WorkerSlot& slot) const {
    try {
      return to_exception(decode_error(reply.bytes), rank_, function, who(slot));
    } catch (const Error&) {
      return std::make_exception_ptr(
          PeerFailureError(rank_, fmt::format("function '{}'", function),
                           fmt::format("{} answered with an error that is not one", who(slot)),
                           "run the same strata version on every task"));
    }
  }

  std::unique_ptr<WorkerLink> connect(WorkerSlot& slot) {
    const transport::tcp::ServiceIdentity mine{coordinator_fingerprint(cluster_), kTunables,
                                               cluster_.collective_size(), rank_, token_};
    const int service_rank = *cluster_.collective_rank({cluster::TaskType::worker, slot.index});
    try {
      return WorkerLink::connect(slot.address, mine, service_rank, incarnation_,
                                 Clock::now() + std::min(options_.timeout, kConnectAttempt),
                                 who(slot));
    } catch (const ConfigurationError&) {
      // The worker refused this coordinator: another cluster, token or version. Retrying
      // cannot help; the error stands until the caller sees it.
      std::lock_guard lock(mutex_);
      slot.refused = true;
      record_error(std::current_exception(), fmt::format("{} refused the coordinator", who(slot)));
      return nullptr;
    }
  }

  // ---- the ps tasks ----------------------------------------------------------------------------

  void watch_ps() {
    const auto closing = [this] {
      std::lock_guard lock(mutex_);
      return closing_;
    };
    try {
      if (!ps_watch_.connect(Clock::now() + options_.timeout, options_.timeout, closing)) return;
    } catch (const Error&) {
      std::lock_guard lock(mutex_);
      record_error(std::current_exception(), "a ps task cannot be watched");
      return;
    }
    for (bool last = false; !last;) {
      last = closing();
      for (const auto& failure :
           ps_watch_.wait(last ? std::chrono::milliseconds(0) : kPsWatchInterval)) {
        std::lock_guard lock(mutex_);
        if (!aborted_) aborted_ = failure;  // every worker is told, even after shutdown
        work_.notify_all();
        record_error(failure, "a ps task failed");
      }
    }
  }

  // Tells a worker the coordinator failed for good (`error`), so that its server raises it;
  // the worker then closes the connection. Called with the lock held, released for the call.
  void abort_worker(WorkerLink& link, std::exception_ptr error,
                    std::unique_lock<std::mutex>& lock) {
    std::vector<std::byte> bytes;
    try {
      std::rethrow_exception(error);
    } catch (...) {
      bytes = encode(current_remote_error());
    }
    lock.unlock();
    (void)link.call(Operation::abort, {0, 0, incarnation_, ""}, bytes, options_.timeout,
                    options_.closure_timeout);
  }

  static std::uint64_t random_incarnation() {
    std::uint64_t incarnation = 0;
    transport::tcp::random_bytes(std::as_writable_bytes(std::span(&incarnation, 1)));
    return incarnation;
  }

  static constexpr std::chrono::milliseconds kConnectAttempt{2000};

  const cluster::ClusterSpec cluster_;
  const CoordinatorOptions options_;
  const std::optional<std::string> token_;
  const int rank_;
  const std::size_t capacity_;
  const std::uint64_t incarnation_;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;
  PsWatch ps_watch_;
  std::thread ps_thread_;

  mutable std::mutex mutex_;
  std::condition_variable work_;      // the queue, the resources, stopping
  std::condition_variable progress_;  // a function finished, an error, room in the queue
  std::deque<std::shared_ptr<ClosureState>> queue_;
  std::deque<Resource> resources_;
  std::size_t unfinished_ = 0;  // queued or running
  std::uint64_t next_closure_ = 1;
  std::exception_ptr error_;
  std::exception_ptr aborted_;  // a ps task died: every worker is told, and raises it
  bool closing_ = false;        // shutdown began: the ps watch looks a last time
  bool stopping_ = false;       // the workers finish
  Clock::time_point last_progress_;
  Clock::time_point last_sent_{};  // when a worker's thread last took a function to run
  CoordinatorReport report_;
};

}  // namespace strata::coordinator::detail
