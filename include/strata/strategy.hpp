// strata/strategy.hpp — Strategy<Placement, Communicator, Sync>: tf.distribute for C++ trainers.
//
// A strategy owns the replicas of one process (one thread each), the communicators between
// them and the variables it creates. The API follows tf.distribute:
//
//   Strategy strategy({.num_replicas = 4});
//   auto w = strategy.create_variable<float>(initial_w);
//   auto losses = strategy.run([&](auto& ctx) {            // once per replica, in parallel
//     auto params = ctx.read(w);                             // this replica's view of w
//     ... compute loss and gradient on this replica's slice of the global batch ...
//     ctx.apply_gradients(optimizer, std::span(gradient), w); // aggregated, then applied
//     return loss;
//   });
//   float loss = strategy.reduce(strata::ReduceOp::mean, losses);
//
// The same loop compiles against every strategy (see strategies.hpp for the aliases).
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/communicator.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/composition.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/detail/replica_pool.hpp>
#include <strata/detail/usable_cpus.hpp>
#include <strata/fusion/bucket_plan.hpp>
#include <strata/fusion/fused_all_reduce.hpp>
#include <strata/placement/adopted_variable.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/replica_context.hpp>
#include <strata/resolve.hpp>
#include <strata/sync/sync.hpp>

namespace strata {

/// Options of a strategy. Plain data: set the fields you care about.
struct StrategyOptions {
  /// Replicas in this process. 0 picks the default: one per CPU this process may run on (its
  /// affinity mask, so taskset and container cpusets count) for placements that run several
  /// replicas, one per visible GPU for GPU placements, one for single-replica placements
  /// (OneDevice, Default).
  int num_replicas = 0;
  /// Options of the communicators between the replicas (deadline of every collective).
  communicator::CommunicatorOptions communicator{};
  /// How the list form of `ReplicaContext::apply_gradients` fuses gradients into buckets:
  /// bucket sizes and compression (docs/fusion.md).
  fusion::BucketOptions fusion{};
};

/// A distribution strategy composed of a Placement (where variables live and how replicas
/// read and update them), a Communicator (how replicas exchange data, modelling
/// communicator::ReplicaGroup) and a Sync policy (when updates meet the variables).
///
/// A policy that lacks a member, and an invalid composition, fail to compile with a sentence
/// that names what is missing or wrong and what to use instead.
/// Thread safety: drive a strategy from one thread; `run` starts the replica threads itself.
template <class P, class C, class S>
class Strategy {
  static_assert(Composition<P, C, S>::kChecked);

 public:
  using placement_type = P;
  using communicator_type = C;
  using sync_type = S;
  using context_type = ReplicaContext<Strategy>;
  template <std::floating_point T>
  using variable_type = typename P::template variable_type<T>;

  /// Creates the replicas and their communicators. For a communicator whose group spans
  /// processes (MultiWorkerMirroredStrategy), first resolves the cluster with
  /// `strata::resolve_cluster()` and hands it to the communicator.
  /// @throws UsageError when `options.num_replicas` is negative or exceeds what the placement
  /// supports; ConfigurationError from the communicator options (STRATA_TIMEOUT) or the
  /// cluster; the communicator's errors when its group cannot form.
  explicit Strategy(StrategyOptions options = {})
      : communicators_(create_communicators(options)),
        fusion_(make_fusion(communicators_.size(), options.fusion)),
        session_(open_session(options)),
        pool_(static_cast<int>(communicators_.size())) {}

  /// As above, with settings of the communicator's own passed on to `C::create` (TF's
  /// `communication_options`), e.g. the ring all-reduce over TCP:
  /// @code
  ///   strata::MultiWorkerMirroredStrategy strategy(
  ///       {.num_replicas = 2}, strata::communicator::TcpOptions{.all_reduce =
  ///       TcpAllReduce::ring});
  /// @endcode
  template <class... CommunicatorSettings>
  requires(sizeof...(CommunicatorSettings) >
           0) explicit Strategy(StrategyOptions options, CommunicatorSettings&&... settings)
      : communicators_(
            create_communicators(options, std::forward<CommunicatorSettings>(settings)...)),
        fusion_(make_fusion(communicators_.size(), options.fusion)),
        session_(open_session(options)),
        pool_(static_cast<int>(communicators_.size())) {}

  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  /// Replicas taking part in each step over the whole cluster (tf.distribute's
  /// `num_replicas_in_sync`); under ParameterServerStrategy, the replicas of every worker,
  /// each pushing its own gradients.
  int num_replicas_in_sync() const noexcept {
    if constexpr (placement::HasSession<P>)
      return session_->num_replicas();
    else
      return communicators_.front().size();
  }
  /// Replicas run by this process.
  int num_local_replicas() const noexcept { return static_cast<int>(communicators_.size()); }
  /// This process's index among the cluster's training processes (the chief and the workers,
  /// as TF numbers them for collectives: the chief first), and their number; 0 and 1 for
  /// single-process strategies.
  int worker_id() const noexcept {
    if constexpr (placement::HasSession<P>)
      return session_->worker();
    else if constexpr (requires(const C& c) { c.worker_rank(); })
      return communicators_.front().worker_rank();
    else if constexpr (C::kSpansProcesses)
      return communicators_.front().rank();
    else
      return 0;
  }
  int num_workers() const noexcept {
    if constexpr (placement::HasSession<P>)
      return session_->num_workers();
    else if constexpr (requires(const C& c) { c.num_workers(); })
      return communicators_.front().num_workers();
    else if constexpr (C::kSpansProcesses)
      return communicators_.front().size();
    else
      return 1;
  }
  /// True on the task that writes checkpoints and logs: TF's chief (the chief task, or worker
  /// 0 of a cluster without one); always true for single-process strategies.
  bool is_chief() const noexcept {
    if constexpr (placement::HasSession<P>)
      return session_->is_chief();
    else if constexpr (C::kSpansProcesses)
      return communicators_.front().is_chief();
    else
      return true;
  }

  /// Runs `fn(ReplicaContext&)` once per replica, each on its own thread, and returns the
  /// per-replica results (nothing if `fn` returns void).
  ///
  /// If a replica throws, the others are released from any collective they wait in (their
  /// communicators are aborted), `run` waits for all of them and rethrows the first exception.
  /// The strategy's communicators are failed afterwards: create a new strategy to continue.
  template <class F>
  requires std::invocable<F&, context_type&>
  auto run(F&& fn) {
    using Result = std::invoke_result_t<F&, context_type&>;
    if (running_.exchange(true))
      throw UsageError(-1, "Strategy::run", "run was called while a run is in progress",
                       "call run from one thread, not from inside a replica function");
    struct Reset {
      std::atomic<bool>& flag;
      ~Reset() { flag.store(false); }
    } reset{running_};

    const auto n = communicators_.size();
    std::vector<std::optional<std::conditional_t<std::is_void_v<Result>, char, Result>>> results(n);
    std::mutex failure_mutex;
    std::exception_ptr first_failure;
    auto body = [&](int replica) {
      const auto r = static_cast<std::size_t>(replica);
      context_type context(communicators_[r], replica, replica_id(r), num_replicas_in_sync(),
                           &fusion_[r], worker_id(), num_workers(), &sync_states_[r]);
      try {
        [[maybe_unused]] const auto scope = enter_replica(replica);
        if constexpr (std::is_void_v<Result>)
          fn(context);
        else
          results[r].emplace(fn(context));
      } catch (...) {
        {
          std::lock_guard lock(failure_mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        communicator::fail_group(communicators_[r], cause_of_replica_failure(r));
      }
    };
    pool_.run(body);
    if (first_failure) std::rethrow_exception(first_failure);
    if constexpr (!std::is_void_v<Result>) {
      std::vector<Result> values;
      values.reserve(n);
      for (auto& result : results)
        values.push_back(std::move(*result));
      return PerReplica<Result>(std::move(values));
    }
  }

  /// Combines per-replica values into one (tf.distribute's `Strategy.reduce`), in replica
  /// order: deterministic. `mean` divides by the number of replicas. Under
  /// ParameterServerStrategy it combines the replicas of this worker (workers never wait for
  /// each other there).
  template <Element T>
  T reduce(ReduceOp op, const PerReplica<T>& values) {
    std::vector<const T*> inputs;
    for (const T& value : values)
      inputs.push_back(&value);
    T result{};
    reduce_n<T>(std::span<T>(&result, 1), inputs, local_op(op));
    across_workers(std::span<T>(&result, 1), op);
    return result;
  }

  /// Element-wise `reduce` of per-replica vectors. @throws UsageError if their sizes differ.
  template <Element T>
  std::vector<T> reduce(ReduceOp op, const PerReplica<std::vector<T>>& values) {
    std::vector<const T*> inputs;
    const std::size_t size = values[0].size();
    for (const auto& value : values) {
      if (value.size() != size)
        throw UsageError(-1, "Strategy::reduce",
                         fmt::format("replica values have {} and {} elements", size, value.size()),
                         "return vectors of one size from every replica");
      inputs.push_back(value.data());
    }
    std::vector<T> result(size);
    reduce_n<T>(std::span<T>(result), inputs, local_op(op));
    across_workers(std::span<T>(result), op);
    return result;
  }

  /// The per-replica values held by this process (tf.distribute's
  /// `experimental_local_results`).
  template <class T>
  std::span<const T> experimental_local_results(const PerReplica<T>& values) const noexcept {
    return values.values();
  }

  /// Creates a variable whose storage follows the placement: a copy per replica under
  /// Mirrored, one shared copy under CentralStorage, shards on the parameter servers under
  /// ParameterServer (where the first worker to create it initializes it).
  template <std::floating_point T>
  variable_type<T> create_variable(
      std::span<const std::type_identity_t<T>> initial,
      placement::VariableAggregation aggregation = placement::VariableAggregation::mean) const {
    if constexpr (placement::HasSession<P>)
      return P::template create<T>(*session_, initial, aggregation);
    else if constexpr (placement::kOnDevice<P>)
      return P::template create<T>(std::span<const int>(devices_), initial, aggregation);
    else
      return P::template create<T>(num_local_replicas(), initial, aggregation);
  }

  /// A variable on parameter servers with an update rule of its own: the servers apply the
  /// optimizer with their slots (UpdateRule::optimizer, TF's), or each worker applies its
  /// optimizer to its copy and the servers add up the changes (UpdateRule::sum, BytePS's: for
  /// optimizers the servers lack, or to keep slots off the servers).
  template <std::floating_point T>
  requires placement::HasSession<P> variable_type<T> create_variable(
      std::span<const std::type_identity_t<T>> initial, placement::VariableAggregation aggregation,
      ps::UpdateRule rule)
  const { return P::template create<T>(*session_, initial, aggregation, rule); }

  /// Adopts buffers the trainer owns as a variable (placement::AdoptedVariable): the trainer's
  /// model keeps its parameters and its optimizer, the strategy aggregates their gradients
  /// (`ReplicaContext::apply_gradients(update, list)`). `copies` holds one buffer per local
  /// replica under a placement with a copy per replica (Mirrored, MultiWorkerMirrored), one
  /// buffer otherwise. Like PyTorch's DDP at construction, it first sets every copy to replica
  /// 0's values (worker 0's across workers), so that the replicas start equal.
  ///
  /// Collective under a placement with a copy per replica: every worker adopts the same
  /// variables, of the same sizes, in the same order.
  /// @throws UsageError for a wrong number of buffers, buffers of different sizes or
  ///   overlapping ones; the communicator's errors (MismatchError for sizes that differ across
  ///   workers).
  template <std::floating_point T>
  placement::AdoptedVariable<T> adopt_variable(
      std::vector<std::span<T>> copies,
      placement::VariableAggregation aggregation = placement::VariableAggregation::mean) {
    static_assert(!placement::HasSession<P>,
                  "strata::Strategy::adopt_variable: parameter servers keep the variables, not "
                  "the trainer; use create_variable under ParameterServerStrategy");
    static_assert(!placement::kOnDevice<P>,
                  "strata::Strategy::adopt_variable: adopted variables are host memory; GPU "
                  "placements create their variables with create_variable");
    constexpr bool kCopyPerReplica = P::kUpdateSite == placement::UpdateSite::every_replica;
    const std::size_t expected = kCopyPerReplica ? communicators_.size() : 1;
    if (copies.size() != expected)
      throw UsageError(
          -1, "Strategy::adopt_variable",
          fmt::format("got {} buffers; {} keeps {}", copies.size(), P::kName,
                      kCopyPerReplica ? fmt::format("a copy per local replica ({})", expected)
                                      : std::string("one copy that every replica reads")),
          kCopyPerReplica ? "pass one buffer per local replica (num_local_replicas())"
                          : "pass the one buffer every replica reads");
    placement::AdoptedVariable<T> variable(std::move(copies), aggregation);
    if (kCopyPerReplica && num_replicas_in_sync() > 1)
      run([&variable](context_type& context) {
        context.broadcast(variable.copy_of_replica(context.local_replica_id()), 0);
      });
    return variable;
  }

  /// The one-buffer form: the trainer's buffer of a strategy with one local replica, or the
  /// buffer every replica reads.
  template <std::floating_point T>
  placement::AdoptedVariable<T> adopt_variable(
      std::span<T> buffer,
      placement::VariableAggregation aggregation = placement::VariableAggregation::mean) {
    return adopt_variable(std::vector<std::span<T>>{buffer}, aggregation);
  }

 private:
  // Per-replica values of several processes (MultiWorkerMirroredStrategy) are combined
  // locally first, then across the workers; a mean divides once, by every replica.
  static constexpr bool kManyProcesses = C::kSpansProcesses;
  static ReduceOp local_op(ReduceOp op) noexcept {
    return kManyProcesses && op == ReduceOp::mean ? ReduceOp::sum : op;
  }
  template <Element T>
  void across_workers(std::span<T> values, ReduceOp op) {
    if constexpr (kManyProcesses) {
      communicators_.front().combine_across_workers(values, local_op(op));
      if (op == ReduceOp::mean) divide<T>(values, static_cast<std::size_t>(num_replicas_in_sync()));
    }
  }

  // Why replica `r` stopped, for every other replica (call inside a catch): a strata::Error
  // passes its root cause on; any other exception (the user's) is this replica's failure, and
  // its text reaches every rank.
  std::exception_ptr cause_of_replica_failure(std::size_t r) const noexcept {
    const std::exception_ptr error = std::current_exception();
    try {
      std::rethrow_exception(error);
    } catch (const Error&) {
      return error;
    } catch (const std::exception& e) {
      return failure_of_replica(r, e.what());
    } catch (...) {
      return failure_of_replica(r, "an exception that is not a std::exception");
    }
  }

  std::exception_ptr failure_of_replica(std::size_t r, std::string_view what) const noexcept {
    try {
      const C& communicator = communicators_[r];
      const int rank = communicator.rank();
      std::string who = fmt::format("replica {}", rank);
      if constexpr (requires { communicator.worker_rank(); })
        who = fmt::format("worker {}, replica {}", communicator.worker_rank(),
                          communicator.local_rank());
      return std::make_exception_ptr(
          PeerFailureError(rank, "Strategy::run",
                           RootCause{rank, fmt::format("{} raised an exception: {}", who, what)}));
    } catch (...) {
      return std::current_exception();
    }
  }

  template <class... CommunicatorSettings>
  static std::vector<C> create_communicators(const StrategyOptions& options,
                                             CommunicatorSettings&&... settings) {
    check_replicas(options.num_replicas);
    if constexpr (C::kSpansProcesses) {
      // One replica per process unless told: the cluster says how many (STRATA_LOCAL_REPLICAS).
      auto cluster = strata::resolve_cluster();
      const int replicas = options.num_replicas > 0 ? options.num_replicas : cluster.local_replicas;
      check_replicas(replicas);
      return C::create(replicas, cluster, options.communicator,
                       std::forward<CommunicatorSettings>(settings)...);
    } else {
      const int replicas = options.num_replicas > 0 ? options.num_replicas : default_replicas();
      return C::create(replicas, options.communicator,
                       std::forward<CommunicatorSettings>(settings)...);
    }
  }

  // The servers a placement keeps its variables with (parameter servers), if any: the cluster
  // is resolved once more, and this worker connects with a lane per local replica.
  placement::SessionHolder<P> open_session(const StrategyOptions& options) const {
    if constexpr (placement::HasSession<P>)
      return P::open_session(strata::resolve_cluster(), num_local_replicas(),
                             options.communicator.timeout);
    else
      return 0;
  }

  // Local replica `r`'s index in the cluster.
  int replica_id(std::size_t r) const noexcept {
    if constexpr (placement::HasSession<P>)
      return session_->first_replica() + static_cast<int>(r);
    else
      return communicators_[r].rank();
  }

  // One replica per usable CPU, what the placement says (one per GPU), or for a worker of a
  // parameter-server cluster what the cluster says (STRATA_LOCAL_REPLICAS, else 1).
  static int default_replicas() {
    if constexpr (placement::HasSession<P>)
      return strata::resolve_cluster().local_replicas;
    else if constexpr (requires { P::default_replicas(); })
      return P::default_replicas();
    else
      return P::kMaxReplicas == 1 ? 1 : detail::usable_cpus();
  }

  // What binds a replica's thread to its device while the replica function runs, if anything.
  auto enter_replica(int replica) const {
    if constexpr (requires { P::replica_scope(replica); })
      return P::replica_scope(devices_[static_cast<std::size_t>(replica)]);
    else
      return 0;
  }

  // The CUDA device of each local replica, as its communicator chose it (GPU placements).
  static std::vector<int> devices_of(const std::vector<C>& communicators) {
    std::vector<int> devices;
    if constexpr (placement::kOnDevice<P>)
      for (const C& communicator : communicators)
        devices.push_back(communicator.device());
    return devices;
  }

  static void check_replicas(int requested) {
    if (requested < 0 || requested > P::kMaxReplicas)
      throw UsageError(-1, "Strategy",
                       fmt::format("{} placement cannot run {} replicas (at most {})", P::kName,
                                   requested, P::kMaxReplicas),
                       P::kMaxReplicas == 1 ? "use MirroredStrategy for several replicas"
                                            : "ask for a positive number of replicas");
  }

  static std::vector<fusion::FusedAllReduce<C>> make_fusion(std::size_t replicas,
                                                            const fusion::BucketOptions& options) {
    std::vector<fusion::FusedAllReduce<C>> out;
    out.reserve(replicas);
    for (std::size_t r = 0; r < replicas; ++r)
      out.emplace_back(options);
    return out;
  }

  std::vector<C> communicators_;
  // Each replica's fused buckets, kept from step to step (one thread each).
  std::vector<fusion::FusedAllReduce<C>> fusion_;
  // What the sync policy keeps for each replica from step to step.
  std::vector<sync::ReplicaState<S>> sync_states_ =
      std::vector<sync::ReplicaState<S>>(communicators_.size());
  std::vector<int> devices_ = devices_of(communicators_);
  placement::SessionHolder<P> session_;
  detail::ReplicaPool pool_;
  std::atomic<bool> running_{false};
};

}  // namespace strata
