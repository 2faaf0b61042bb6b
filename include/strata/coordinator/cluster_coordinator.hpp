// strata/coordinator/cluster_coordinator.hpp — TF2's ClusterCoordinator: the chief schedules
// registered functions (functions.hpp) on the workers, which survive each other's loss.
//
// This header declares; the definitions (and the TCP transport under them) are in
// coordinator/impl/cluster_coordinator.ipp, compiled into every unit header-only or once into
// strata::compiled (config.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/config.hpp>
#include <strata/coordinator/codec.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/coordinator/remote_value.hpp>
#include <strata/core/deadline.hpp>

namespace strata::coordinator {

/// Options of a ClusterCoordinator. Plain data: set the fields you care about.
struct CoordinatorOptions {
  /// The secret the workers and ps tasks ask for; unset: read STRATA_CLUSTER_TOKEN.
  std::optional<std::string> cluster_token{};
  /// How long connecting to a task, sending it a request, and `schedule` on a full queue may
  /// take; a ps task that cannot be reached in this time is a failure. Defaults to
  /// STRATA_TIMEOUT when set, else 60 s.
  std::chrono::milliseconds timeout = default_timeout();
  /// How long one run of a function may take before its worker counts as failed (stopped or
  /// hung: the function goes back to the queue), and how long `join` and `fetch` wait without
  /// any scheduled function finishing. Defaults to twice STRATA_TIMEOUT when set, else 120 s:
  /// longer than the function's own calls may block (a ps client's, under STRATA_TIMEOUT), so
  /// that those raise their errors, naming the task they waited for, before its worker is
  /// given up.
  std::chrono::milliseconds closure_timeout = 2 * default_timeout();
  /// Scheduled functions not yet running that `schedule` accepts before it blocks; 0: 256 per
  /// worker.
  std::size_t queue_capacity = 0;
};

/// What a coordinator did, for logs and tests.
struct CoordinatorReport {
  std::uint64_t scheduled = 0;        ///< functions scheduled
  std::uint64_t succeeded = 0;        ///< functions that returned
  std::uint64_t failed = 0;           ///< functions that raised
  std::uint64_t cancelled = 0;        ///< functions cancelled before they ran
  std::uint64_t retried = 0;          ///< runs after a first one was lost with its worker
  std::uint64_t worker_failures = 0;  ///< connections to a worker lost or timed out
  std::uint64_t connections = 0;      ///< connections made to workers (first ones and rejoins)
};

namespace detail {
class CoordinatorCore;  // coordinator/impl/cluster_coordinator.ipp
}

/// The coordinator, on the chief task of a cluster with workers (and usually ps tasks): it
/// connects to every worker's server (`serve_if_worker`), hands each scheduled function to a
/// free worker, and watches the ps tasks.
///
/// - `schedule` returns a RemoteValue at once; the function runs **at least once**: when its
///   worker dies, stops answering (closure_timeout) or loses its connection, it goes back to the
///   queue and runs on another worker. A restarted worker rejoins: the coordinator reconnects,
///   rebuilds its per-worker resources, and gives it functions again.
/// - `join` waits for every scheduled function; `done` polls. Both, and `schedule`, raise the
///   first error since the last one raised (a function's error, or a ps task's failure) and
///   clear it; the functions still queued then are cancelled with CancelledError.
/// - A ps task that dies is seen within 100 ms: PeerFailureError naming it.
///
/// Thread safety: one thread calls the coordinator; RemoteValues may be read from any thread.
class ClusterCoordinator {
 public:
  /// The coordinator of this process's cluster (strata::resolve_cluster: TF_CONFIG), which
  /// must run on the chief task.
  /// @throws ConfigurationError when this task is not the chief or the cluster has no worker.
  STRATA_DECL explicit ClusterCoordinator(CoordinatorOptions options = {});
  /// The coordinator of `cluster`, from its chief task.
  /// @throws ConfigurationError when the cluster has no chief or no worker.
  STRATA_DECL explicit ClusterCoordinator(const cluster::ClusterSpec& cluster,
                                          CoordinatorOptions options = {});
  /// Shuts down: see `shutdown`.
  STRATA_DECL ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  /// Queues `function(worker, args...)` and returns its result to come. Blocks while the queue
  /// is full.
  /// @throws the first error since the last one raised (see the class); TimeoutError when the
  ///   queue stays full for `timeout`; UsageError after shutdown.
  template <class R, class... A, class... Given>
  RemoteValue<R> schedule(const Function<R, A...>& function, Given&&... args) {
    static_assert(sizeof...(A) == sizeof...(Given), "schedule takes the function's arguments");
    auto bytes = to_bytes(std::tuple<A...>(std::forward<Given>(args)...));
    return RemoteValue<R>(schedule_bytes(function.name(), function.signature(), std::move(bytes)));
  }

  /// Builds `resource(worker, args...)` on every worker, now and on every worker that restarts,
  /// before it runs any function scheduled after this call (TF's create_per_worker_dataset).
  /// A function reads its worker's instance with `worker.get(handle)`. An error building it is
  /// raised by `join`, as a function's.
  template <class T, class... A, class... Given>
  PerWorker<T> create_per_worker(const ResourceFunction<T, A...>& resource, Given&&... args) {
    static_assert(sizeof...(A) == sizeof...(Given),
                  "create_per_worker takes the resource function's arguments");
    auto bytes = to_bytes(std::tuple<A...>(std::forward<Given>(args)...));
    return {add_resource_bytes(resource.name(), resource.signature(), std::move(bytes))};
  }

  /// Waits until every scheduled function has run (or failed, or was cancelled).
  /// @throws the first error since the last one raised; TimeoutError when no function finished
  ///   for `closure_timeout` while some are pending, and the one sent to a worker last has had
  ///   its `closure_timeout` to answer or go to another worker (naming the workers' states).
  STRATA_DECL void join();

  /// True when every scheduled function has run; never waits.
  /// @throws the first error since the last one raised.
  STRATA_DECL bool done();

  /// Cancels the functions still queued, waits for those running (closure_timeout at most),
  /// tells the workers to finish (their `serve_if_worker` returns) and stops. Idempotent.
  STRATA_DECL void shutdown();

  STRATA_DECL int num_workers() const noexcept;
  STRATA_DECL CoordinatorReport report() const;

 private:
  STRATA_DECL std::shared_ptr<const detail::ClosureState> schedule_bytes(
      std::string_view name, std::uint64_t signature, std::vector<std::byte> args);
  STRATA_DECL std::uint64_t add_resource_bytes(std::string_view name, std::uint64_t signature,
                                               std::vector<std::byte> args);

  std::shared_ptr<detail::CoordinatorCore> core_;
};

}  // namespace strata::coordinator

#if STRATA_HEADER_ONLY
#include <strata/coordinator/impl/cluster_coordinator.ipp>
#endif
