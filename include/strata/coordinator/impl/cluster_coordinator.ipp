// strata/coordinator/impl/cluster_coordinator.ipp — the coordinator's definitions
// (coordinator/cluster_coordinator.hpp).
//
// One thread per worker connects to it (again and again, should it fail), builds the per-worker
// resources on it, then takes functions from the queue and runs them there one at a time, over
// the workers' TCP service (worker_server.hpp). A function whose worker is lost goes back to the
// front of the queue. One more thread holds a connection to every ps task and polls them: a ps
// task never speaks first, so anything readable there means it closed.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
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

#include <poll.h>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/protocol.hpp>
#include <strata/core/detail/join.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>
#include <strata/transport/tcp/service_client.hpp>

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
  using Io = transport::tcp::ServiceIo;
  using Connection = transport::tcp::ServiceConnection;

 public:
  CoordinatorCore(const cluster::ClusterSpec& spec, CoordinatorOptions opts)
      : cluster_(validated(spec, opts)),
        options_(std::move(opts)),
        token_(options_.cluster_token ? options_.cluster_token
                                      : environment_variable("STRATA_CLUSTER_TOKEN")),
        rank_(*cluster_.collective_rank({cluster::TaskType::chief, 0})),
        capacity_(options_.queue_capacity != 0
                      ? options_.queue_capacity
                      : 256 * cluster_.num_tasks(cluster::TaskType::worker)) {
    if (token_ && token_->empty())
      throw ConfigurationError(rank_, "ClusterCoordinator", "the cluster token is empty",
                               "set a secret shared by every task, or leave it unset");
    transport::tcp::random_bytes(std::as_writable_bytes(std::span(&incarnation_, 1)));
    for (const auto& [index, address] : cluster_.tasks(cluster::TaskType::worker))
      workers_.push_back(
          std::make_unique<WorkerSlot>(WorkerSlot{index, address, {}, false, false}));
    for (const auto& [index, address] : cluster_.tasks(cluster::TaskType::ps))
      ps_.push_back({index, address, nullptr});
    last_progress_ = Clock::now();
  }

  void start() {
    for (auto& slot : workers_)
      slot->thread = std::thread([this, worker = slot.get()] { serve_worker(*worker); });
    if (!ps_.empty()) ps_thread_ = std::thread([this] { watch_ps(); });
  }

  // ---- the caller's side ---------------------------------------------------------------------

  std::shared_ptr<const ClosureState> schedule(std::string_view name, std::uint64_t signature,
                                               std::vector<std::byte> args) {
    std::unique_lock lock(mutex_);
    raise_pending_error();
    if (stopping_)
      throw UsageError(rank_, "ClusterCoordinator::schedule", "the coordinator has shut down",
                       "schedule before shutdown()");
    const auto until = Clock::now() + options_.timeout;
    while (queue_.size() >= capacity_) {
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
      if (stopping_) return;
      stopping_ = true;
      cancel_queued("the coordinator shut down");
      work_.notify_all();
      progress_.notify_all();
    }
    if (ps_thread_.joinable()) ps_thread_.join();
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
  struct PsTask {
    int index;
    cluster::Address address;
    std::unique_ptr<Connection> link;
  };
  struct Reply {
    enum class Kind : std::uint8_t { ok, error, lost } kind = Kind::lost;
    std::vector<std::byte> bytes;  // the result, or the RemoteError's
    std::string why;               // lost: what happened to the connection
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

  void wait_for_progress(std::unique_lock<std::mutex>& lock, std::string_view operation) {
    const auto until = last_progress_ + options_.closure_timeout;
    if (progress_.wait_until(lock, until) == std::cv_status::timeout &&
        Clock::now() >= last_progress_ + options_.closure_timeout)
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
    std::unique_ptr<Connection> link;
    std::uint64_t sequence = 0;
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
        work_.wait(lock, [&] { return stopping_ || built < resources_.size() || !queue_.empty(); });
        if (stopping_) break;
        if (built < resources_.size()) {
          resource = &resources_[built];  // a deque: stays where it is
        } else {
          closure = std::move(queue_.front());
          queue_.pop_front();
          closure->phase = Phase::running;
          if (++closure->attempts > 1) ++report_.retried;
          progress_.notify_all();  // room in the queue
        }
      }
      const Reply reply =
          resource != nullptr
              ? call(*link, sequence, Operation::build,
                     {resource->signature, resource->id, incarnation_, resource->name},
                     resource->args)
              : call(*link, sequence, Operation::run,
                     {closure->signature, closure->id, incarnation_, closure->name}, closure->args);
      std::lock_guard lock(mutex_);
      if (reply.kind == Reply::Kind::lost) {
        link.reset();
        slot.connected = false;
        ++report_.worker_failures;
        if (closure) {
          closure->phase = Phase::queued;
          if (stopping_) {
            queue_.push_front(std::move(closure));
            cancel_queued(fmt::format("the coordinator shut down after {} was lost: {}", who(slot),
                                      reply.why));
          } else {
            queue_.push_front(std::move(closure));
            work_.notify_all();
          }
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
        closure->result = reply.bytes;
        closure->phase = Phase::succeeded;
        ++report_.succeeded;
        note_progress();
      } else {
        closure->error = remote_error(reply, closure->name, slot);
        closure->phase = Phase::failed;
        ++report_.failed;
        record_error(closure->error, fmt::format("function '{}' failed", closure->name));
      }
    }
    // Shutting down: the worker's server returns, and its resources are destroyed.
    const std::array<std::byte, 0> none{};
    (void)call(*link, sequence, Operation::done, {}, none);
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

  std::unique_ptr<Connection> connect(WorkerSlot& slot) {
    const transport::tcp::ServiceIdentity mine{coordinator_fingerprint(cluster_), kTunables,
                                               cluster_.collective_size(), rank_, token_};
    const int service_rank = *cluster_.collective_rank({cluster::TaskType::worker, slot.index});
    std::string why;
    try {
      return Connection::connect(slot.address, mine, service_rank, 0, incarnation_,
                                 Clock::now() + std::min(options_.timeout, kConnectAttempt),
                                 "ClusterCoordinator", who(slot), why);
    } catch (const ConfigurationError&) {
      // The worker refused this coordinator: another cluster, token or version. Retrying
      // cannot help; the error stands until the caller sees it.
      std::lock_guard lock(mutex_);
      slot.refused = true;
      record_error(std::current_exception(), fmt::format("{} refused the coordinator", who(slot)));
      return nullptr;
    }
  }

  // Sends one request and waits for its reply (closure_timeout at most).
  Reply call(Connection& link, std::uint64_t& sequence, Operation operation,
             const RequestPrefix& prefix, std::span<const std::byte> args) {
    Reply reply;
    Writer writer;
    if (operation != Operation::done) encode(writer, prefix);
    const auto& head = writer.view();
    transport::tcp::FrameHeader header;
    header.type = transport::tcp::FrameType::request;
    header.kind = static_cast<Collective>(operation);
    header.element_type = DataType::uint8;
    header.sequence = ++sequence;
    header.count = head.size() + args.size();
    if (header.count > 0xFFFF'FFFFu) {
      reply.why = "a request over 4 GiB";
      return reply;
    }
    header.payload_bytes = static_cast<std::uint32_t>(header.count);
    const std::array<std::span<const std::byte>, 2> parts{std::span(head), args};
    const auto send_until = Clock::now() + options_.timeout;
    Io io = link.send(header, parts, send_until);
    if (io != Io::done) {
      reply.why = describe(io, "sending a request");
      return reply;
    }
    const auto until = Clock::now() + options_.closure_timeout;
    transport::tcp::FrameBytes bytes{};
    io = link.receive(bytes, until);
    if (io != Io::done) {
      reply.why = describe(io, "waiting for the reply");
      return reply;
    }
    transport::tcp::FrameHeader answer;
    if (transport::tcp::decode(bytes, answer, 0xFFFF'FFFFu) ||
        answer.type != transport::tcp::FrameType::reply || answer.sequence != sequence ||
        static_cast<std::uint8_t>(answer.kind) != static_cast<std::uint8_t>(operation) ||
        (answer.root != static_cast<std::int32_t>(ReplyStatus::ok) &&
         answer.root != static_cast<std::int32_t>(ReplyStatus::error))) {
      reply.why = "a reply that does not answer the request";
      return reply;
    }
    reply.bytes.resize(answer.payload_bytes);
    io = link.receive(reply.bytes, until);
    if (io != Io::done) {
      reply.why = describe(io, "reading the reply");
      return reply;
    }
    reply.kind = answer.root == static_cast<std::int32_t>(ReplyStatus::ok) ? Reply::Kind::ok
                                                                           : Reply::Kind::error;
    return reply;
  }

  std::string describe(Io io, std::string_view doing) const {
    switch (io) {
      case Io::closed:
        return fmt::format("the connection closed while {}", doing);
      case Io::timed_out:
        return fmt::format("no answer within the deadline while {}", doing);
      default:
        return fmt::format("the connection broke while {}", doing);
    }
  }

  // ---- the ps tasks ----------------------------------------------------------------------------

  void watch_ps() {
    const transport::tcp::ServiceIdentity mine{ps::ps_fingerprint(cluster_), ps::kTunables,
                                               cluster_.collective_size(), rank_, token_};
    const auto connect_until = Clock::now() + options_.timeout;
    for (auto& task : ps_) {
      std::string why = "no attempt was made";
      while (!task.link) {
        {
          std::lock_guard lock(mutex_);
          if (stopping_) return;
        }
        try {
          task.link = Connection::connect(task.address, mine, task.index, kWatchLane, incarnation_,
                                          connect_until, "ClusterCoordinator", ps_who(task), why);
        } catch (const ConfigurationError&) {
          std::lock_guard lock(mutex_);
          record_error(std::current_exception(), "a ps task refused the coordinator");
          return;
        }
        if (task.link) break;
        if (Clock::now() >= connect_until) {
          std::lock_guard lock(mutex_);
          record_error(std::make_exception_ptr(TimeoutError(
                           rank_, "ClusterCoordinator",
                           fmt::format("could not connect to {} within {} ms (last attempt: {})",
                                       ps_who(task), options_.timeout.count(), why),
                           "check that the ps task is running with the same cluster spec, or "
                           "raise CoordinatorOptions::timeout")),
                       fmt::format("{} cannot be reached", ps_who(task)));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    std::vector<pollfd> fds;
    for (auto& task : ps_)
      fds.push_back({task.link->native_handle(), POLLIN | POLLRDHUP, 0});
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
      const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(kPsWatchInterval.count()));
      if (ready <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        fds[i].fd = -1;  // seen once
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        record_error(
            std::make_exception_ptr(PeerFailureError(
                rank_, "ClusterCoordinator",
                fmt::format("{} closed its connection: the parameter server died or stopped "
                            "serving",
                            ps_who(ps_[i])),
                "the variables on that ps task are gone: restart the job and restore from "
                "the last checkpoint")),
            fmt::format("{} failed", ps_who(ps_[i])));
      }
    }
  }

  static std::string ps_who(const PsTask& task) {
    return fmt::format("ps task {} ({})", task.index, task.address.to_string());
  }

  static constexpr std::chrono::milliseconds kConnectAttempt{2000};
  // The watch connection's lane, apart from the lanes of the chief's own ps client.
  static constexpr std::uint16_t kWatchLane = 0xFFFF;

  const cluster::ClusterSpec cluster_;
  const CoordinatorOptions options_;
  const std::optional<std::string> token_;
  const int rank_;
  const std::size_t capacity_;
  std::uint64_t incarnation_ = 0;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;
  std::vector<PsTask> ps_;
  std::thread ps_thread_;

  mutable std::mutex mutex_;
  std::condition_variable work_;      // the queue, the resources, stopping
  std::condition_variable progress_;  // a function finished, an error, room in the queue
  std::deque<std::shared_ptr<ClosureState>> queue_;
  std::deque<Resource> resources_;
  std::size_t unfinished_ = 0;  // queued or running
  std::uint64_t next_closure_ = 1;
  std::exception_ptr error_;
  bool stopping_ = false;
  Clock::time_point last_progress_;
  CoordinatorReport report_;
};

STRATA_DECL std::span<const std::byte> closure_result(const ClosureState& closure) {
  return closure.core->result(closure);
}

STRATA_DECL bool closure_finished(const ClosureState& closure) {
  return closure.core->finished(closure);
}

}  // namespace strata::coordinator::detail

namespace strata::coordinator {

STRATA_DECL ClusterCoordinator::ClusterCoordinator(CoordinatorOptions options) {
  const cluster::ResolvedCluster resolved = cluster::resolve_cluster();
  if (resolved.task.type != cluster::TaskType::chief)
    throw ConfigurationError(
        resolved.rank, "ClusterCoordinator",
        fmt::format("this task is {} {}, not the chief", resolved.task.type, resolved.task.index),
        "create the coordinator on the chief task; call serve_if_worker "
        "on the workers and serve_if_ps on the ps tasks");
  core_ = std::make_shared<detail::CoordinatorCore>(resolved.cluster, std::move(options));
  core_->start();
}

STRATA_DECL ClusterCoordinator::ClusterCoordinator(const cluster::ClusterSpec& cluster,
                                                   CoordinatorOptions options)
    : core_(std::make_shared<detail::CoordinatorCore>(cluster, std::move(options))) {
  core_->start();
}

STRATA_DECL ClusterCoordinator::~ClusterCoordinator() {
  core_->shutdown();
}

STRATA_DECL void ClusterCoordinator::join() {
  core_->join();
}

STRATA_DECL bool ClusterCoordinator::done() {
  return core_->done();
}

STRATA_DECL void ClusterCoordinator::shutdown() {
  core_->shutdown();
}

STRATA_DECL int ClusterCoordinator::num_workers() const noexcept {
  return core_->num_workers();
}

STRATA_DECL CoordinatorReport ClusterCoordinator::report() const {
  return core_->report();
}

STRATA_DECL std::shared_ptr<const detail::ClosureState> ClusterCoordinator::schedule_bytes(
    std::string_view name, std::uint64_t signature, std::vector<std::byte> args) {
  return core_->schedule(name, signature, std::move(args));
}

STRATA_DECL std::uint64_t ClusterCoordinator::add_resource_bytes(std::string_view name,
                                                                 std::uint64_t signature,
                                                                 std::vector<std::byte> args) {
  return core_->add_resource(name, signature, std::move(args));
}

}  // namespace strata::coordinator
