// strata/replica_context.hpp — what `Strategy::run` hands each replica, and what it returns.
#pragma once

#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/communicator/options.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/fusion/fused_all_reduce.hpp>
#include <strata/fusion/gradient_buckets.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/placement/adopted_variable.hpp>
#include <strata/sync/detail/step_readiness.hpp>
#include <strata/sync/sync.hpp>

namespace strata {

/// A gradient and the variable it updates: one entry of the list form of
/// ReplicaContext::apply_gradients (TF's `optimizer.apply_gradients(zip(grads, vars))`).
template <std::floating_point T, class Variable>
struct GradientAndVariable {
  std::span<T> gradient;
  Variable* variable = nullptr;
};

/// The entry of `variable` and its `gradient` (a span, or a contiguous buffer the caller keeps).
template <class Variable, class Gradient>
requires std::ranges::contiguous_range<Gradient> && std::ranges::borrowed_range<Gradient> &&
    std::floating_point<std::ranges::range_value_t<Gradient>>
auto gradient_for(Variable& variable, Gradient&& gradient) {
  using T = std::remove_reference_t<std::ranges::range_reference_t<Gradient>>;
  return GradientAndVariable<T, Variable>{std::span<T>(gradient), &variable};
}

namespace detail {

// The list form's step for sync policies without one of their own: `apply()` runs the list
// form once every gradient is ready.
template <class Context, class O, class Entry>
class PerVariableStep {
 public:
  PerVariableStep(Context& context, const O& optimizer, std::span<const Entry> list)
      : context_(&context),
        optimizer_(optimizer),
        list_(list.begin(), list.end()),
        ready_(list.size()) {}
  PerVariableStep(const PerVariableStep&) = delete;
  PerVariableStep& operator=(const PerVariableStep&) = delete;

  void ready(std::size_t i) {
    std::lock_guard lock(mutex_);
    ready_.mark(i, context_->replica_id_in_sync_group());
  }

  void apply() {
    ready_.require_all(context_->replica_id_in_sync_group());
    context_->apply_gradients(optimizer_, std::span<const Entry>(list_));
  }

 private:
  Context* context_;
  O optimizer_;
  std::vector<Entry> list_;
  sync::detail::StepReadiness ready_;
  std::mutex mutex_;
};

}  // namespace detail

/// One value per replica, as returned by `Strategy::run` (tf.distribute's `PerReplica`).
template <class T>
class PerReplica {
 public:
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}

  std::size_t size() const noexcept { return values_.size(); }
  const T& operator[](std::size_t replica) const noexcept { return values_[replica]; }
  std::span<const T> values() const noexcept { return values_; }
  auto begin() const noexcept { return values_.begin(); }
  auto end() const noexcept { return values_.end(); }

 private:
  std::vector<T> values_;
};

/// What a replica function receives: which replica it is, collectives between the replicas,
/// and access to distributed variables (tf.distribute's `ReplicaContext`).
template <class StrategyType>
class ReplicaContext {
 public:
  using placement_type = typename StrategyType::placement_type;
  using communicator_type = typename StrategyType::communicator_type;
  using sync_type = typename StrategyType::sync_type;
  template <std::floating_point T>
  using variable_type = typename placement_type::template variable_type<T>;
  using sync_state_type = sync::ReplicaState<sync_type>;

  /// `local_replica`: this replica's index among the replicas of this process (which copy of
  /// a mirrored variable it owns); `replica` and `num_replicas` place it in the whole cluster.
  /// `fusion`: the buckets this replica keeps from step to step for the list form of
  /// apply_gradients and all_reduce_fused (none: made for each call). `worker` and
  /// `num_workers`: this process among the cluster's training processes. `sync_state`: what
  /// the sync policy keeps for this replica from step to step (none: kept by this context).
  ReplicaContext(communicator_type& communicator, int local_replica, int replica, int num_replicas,
                 fusion::FusedAllReduce<communicator_type>* fusion = nullptr, int worker = 0,
                 int num_workers = 1, sync_state_type* sync_state = nullptr) noexcept
      : communicator_(&communicator),
        fusion_(fusion),
        sync_state_(sync_state),
        replica_(replica),
        num_replicas_(num_replicas),
        local_replica_(local_replica),
        worker_(worker),
        num_workers_(num_workers) {}

  /// This replica's index, 0 ≤ id < num_replicas_in_sync(), over every process of the
  /// cluster (worker · local replicas + local replica under MultiWorkerMirroredStrategy and
  /// ParameterServerStrategy).
  int replica_id_in_sync_group() const noexcept { return replica_; }
  int num_replicas_in_sync() const noexcept { return num_replicas_; }
  /// This replica's index among the replicas of this process.
  int local_replica_id() const noexcept { return local_replica_; }
  /// This process's index among the cluster's training processes (TF's task index among the
  /// chief and workers), and their number: 0 and 1 for single-process strategies.
  int worker_id() const noexcept { return worker_; }
  int num_workers() const noexcept { return num_workers_; }
  /// The communicator connecting this replica to the others, for collectives the context
  /// does not wrap (it models `communicator::Communicator`). Under ParameterServerStrategy it
  /// connects the replicas of this worker only: workers never wait for each other there.
  communicator_type& communicator() noexcept { return *communicator_; }

  /// Reduces `data` in place over all replicas.
  template <Element T>
  void all_reduce(ReduceOp op, std::span<T> data) {
    communicator_->all_reduce(data, op);
  }
  /// Reduces one value over all replicas and returns the result.
  template <Element T>
  T all_reduce(ReduceOp op, T value) {
    communicator_->all_reduce(std::span<T>(&value, 1), op);
    return value;
  }
  /// Reduces every one of `gradients` in place over all replicas, fused into buckets (the
  /// strategy's StrategyOptions::fusion): a few collectives instead of one per gradient. The
  /// buckets of a list are planned and checked across replicas at its first call and kept for
  /// the next calls with the same list (types and counts, in order). Host memory only.
  /// @throws MismatchError when replicas pass different lists; the communicator's errors.
  void all_reduce_fused(ReduceOp op, std::span<const fusion::GradientRef> gradients) {
    static_assert(!communicator::kDeviceMemory<communicator_type>,
                  "strata: fused buckets live in host memory; a GPU communicator all-reduces "
                  "each gradient on its own");
    fused_all_reduce()(*communicator_, gradients, op);
  }

  /// The buckets this replica keeps for `gradients` reduced with `op`, bound to their buffers:
  /// `ready(i)` as gradient i is computed, then `wait()` (fusion::GradientBuckets).
  fusion::GradientBuckets<communicator_type>& fused_buckets(
      ReduceOp op, std::span<const fusion::GradientRef> gradients) {
    static_assert(!communicator::kDeviceMemory<communicator_type>,
                  "strata: fused buckets live in host memory");
    return fused_all_reduce().buckets(*communicator_, gradients, op);
  }

  /// What the sync policy keeps for this replica from step to step (`sync::ReplicaState`):
  /// the strategy's, which lasts as long as it does.
  sync_state_type& sync_state() {
    if (sync_state_ != nullptr) return *sync_state_;
    if (!own_sync_state_) own_sync_state_ = std::make_unique<sync_state_type>();
    return *own_sync_state_;
  }

  /// Sets `data` on every replica to replica `root`'s (e.g. the initial parameters of a model
  /// the trainer owns).
  template <Element T>
  void broadcast(std::span<T> data, int root = 0) {
    communicator_->broadcast(data, root);
  }
  /// Reduces `data` in place onto replica `root` (the others' buffers are left unspecified).
  template <Element T>
  void reduce(ReduceOp op, std::span<T> data, int root = 0) {
    communicator_->reduce(data, op, root);
  }
  /// Reduces every replica's `send` and leaves replica r the r-th of num_replicas_in_sync()
  /// equal slices in `received` (send.size() == num_replicas_in_sync() · received.size()).
  template <Element T>
  void reduce_scatter(ReduceOp op, std::span<const std::type_identity_t<T>> send,
                      std::span<T> received) {
    communicator_->reduce_scatter(send, received, op, communicator::CallOptions{});
  }
  /// Returns once every replica has called it.
  void barrier() { communicator_->barrier(); }

  /// Concatenates every replica's `local` into `gathered` (replica order);
  /// gathered.size() == num_replicas_in_sync() · local.size().
  template <Element T>
  void all_gather(std::span<const std::type_identity_t<T>> local, std::span<T> gathered) {
    communicator_->all_gather(local, gathered);
  }

  /// This replica's view of `variable`, as the placement stores it (its own copy under
  /// Mirrored, the shared one under CentralStorage).
  template <std::floating_point T>
  std::span<const T> read(const variable_type<T>& variable) const noexcept {
    return placement_type::read(variable, local_replica_);
  }

  /// Sets `variable` to the aggregation of every replica's `value` (see VariableAggregation).
  template <std::floating_point T>
  void assign(variable_type<T>& variable, std::span<const std::type_identity_t<T>> value) {
    sync_type::assign(*this, variable, value);
  }

  /// Aggregates `gradient` over the replicas by the variable's aggregation (mean unless it
  /// was created otherwise) and applies `optimizer` to `variable`, as the strategy's Sync
  /// policy prescribes. `gradient` is reduced in place: no copy of it is made.
  /// @throws UsageError when sizes differ or the variable's aggregation is `none` with more
  /// than one replica; communicator errors as documented there.
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  void apply_gradients(const O& optimizer, std::span<T> gradient, variable_type<T>& variable) {
    sync_type::apply_gradients(*this, optimizer, gradient, variable);
  }

  /// The list form: aggregates every gradient of `list` and applies `optimizer` to its variable,
  /// as the one-variable form does for each, with the collectives fused into buckets where the
  /// sync policy and placement allow (synchronous training on host memory: one or a few
  /// all-reduces per step instead of one per variable).
  ///
  ///     ctx.apply_gradients(optimizer, {strata::gradient_for(w, grad_w),
  ///                                     strata::gradient_for(b, grad_b)});
  ///
  /// Every replica must pass the same list (variables, in order) at every step. A list holds
  /// one element type: call once per type.
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  void apply_gradients(const O& optimizer,
                       std::span<const GradientAndVariable<T, variable_type<T>>> list) {
    if constexpr (requires { sync_type::apply_gradients_list(*this, optimizer, list); }) {
      sync_type::apply_gradients_list(*this, optimizer, list);
    } else {
      for (const auto& entry : list)
        sync_type::apply_gradients(*this, optimizer, entry.gradient, *entry.variable);
    }
  }

  /// The list form, overlapped with the trainer's own backward pass: the returned step takes
  /// `ready(i)` as gradient i of `list` is computed (from any thread), starting its bucket's
  /// all-reduce as soon as the bucket is full, and `apply()` once all are ready, which waits
  /// for the collectives and updates the variables. Results equal the list form's.
  ///
  ///     auto step = ctx.begin_apply_gradients(optimizer, {strata::gradient_for(w2, g2),
  ///                                                       strata::gradient_for(w1, g1)});
  ///     backward_layer_2(g2);  step.ready(0);   // all-reduces while layer 1's runs
  ///     backward_layer_1(g1);  step.ready(1);
  ///     step.apply();
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  auto begin_apply_gradients(const O& optimizer,
                             std::span<const GradientAndVariable<T, variable_type<T>>> list) {
    using Entry = GradientAndVariable<T, variable_type<T>>;
    if constexpr (requires { typename sync_type::template ListStep<ReplicaContext, O, Entry>; })
      return
          typename sync_type::template ListStep<ReplicaContext, O, Entry>(*this, optimizer, list);
    else
      return detail::PerVariableStep<ReplicaContext, O, Entry>(*this, optimizer, list);
  }
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  auto begin_apply_gradients(const O& optimizer,
                             std::initializer_list<GradientAndVariable<T, variable_type<T>>> list) {
    return begin_apply_gradients(
        optimizer,
        std::span<const GradientAndVariable<T, variable_type<T>>>(list.begin(), list.size()));
  }
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  auto begin_apply_gradients(const O& optimizer,
                             const std::vector<GradientAndVariable<T, variable_type<T>>>& list) {
    return begin_apply_gradients(optimizer,
                                 std::span<const GradientAndVariable<T, variable_type<T>>>(list));
  }
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  void apply_gradients(const O& optimizer,
                       std::initializer_list<GradientAndVariable<T, variable_type<T>>> list) {
    apply_gradients(optimizer, std::span<const GradientAndVariable<T, variable_type<T>>>(
                                   list.begin(), list.size()));
  }
  template <class O, std::floating_point T>
  requires optim::Optimizer<O, T>
  void apply_gradients(const O& optimizer,
                       const std::vector<GradientAndVariable<T, variable_type<T>>>& list) {
    apply_gradients(optimizer, std::span<const GradientAndVariable<T, variable_type<T>>>(list));
  }

  /// This replica's buffer of an adopted variable (its own, or the one every replica reads).
  template <std::floating_point T>
  std::span<const T> read(const placement::AdoptedVariable<T>& variable) const noexcept {
    return variable.copy_of_replica(local_replica_);
  }

  /// The list form for variables the trainer owns (Strategy::adopt_variable): aggregates
  /// every gradient of `list` in place by its variable's aggregation, as the list form above
  /// does (fused into buckets), then calls `update()`, the trainer's own optimizer step, on
  /// the replicas that update: every replica under a placement with a copy per replica, replica
  /// 0 under one whose copy every replica reads (the others wait for it). `update` reads the
  /// aggregated gradients where the list's spans point (e.g. the parameters' `.grad()`).
  ///
  ///     ctx.apply_gradients([&] { optimizer.step(); },
  ///                         {strata::gradient_for(w, grad_w), strata::gradient_for(b, grad_b)});
  template <class Update, std::floating_point T>
  requires std::invocable<Update&>
  void apply_gradients(
      Update&& update,
      std::span<const GradientAndVariable<T, placement::AdoptedVariable<T>>> list) {
    auto step = begin_apply_gradients(std::forward<Update>(update), list);
    for (std::size_t i = 0; i < list.size(); ++i)
      step.ready(i);
    step.apply();
  }
  template <class Update, std::floating_point T>
  requires std::invocable<Update&>
  void apply_gradients(
      Update&& update,
      std::initializer_list<GradientAndVariable<T, placement::AdoptedVariable<T>>> list) {
    apply_gradients(std::forward<Update>(update),
                    std::span<const GradientAndVariable<T, placement::AdoptedVariable<T>>>(
                        list.begin(), list.size()));
  }
  template <class Update, std::floating_point T>
  requires std::invocable<Update&>
  void apply_gradients(
      Update&& update,
      const std::vector<GradientAndVariable<T, placement::AdoptedVariable<T>>>& list) {
    apply_gradients(std::forward<Update>(update),
                    std::span<const GradientAndVariable<T, placement::AdoptedVariable<T>>>(list));
  }

  /// The adopted variables' list form overlapped with the trainer's backward pass, as
  /// `begin_apply_gradients(optimizer, list)`: `ready(i)` as gradient i is computed, then
  /// `apply()`, which waits for the collectives and calls `update()` as above.
  template <class Update, std::floating_point T>
  requires std::invocable<Update&>
  auto begin_apply_gradients(
      Update&& update,
      std::span<const GradientAndVariable<T, placement::AdoptedVariable<T>>> list) {
    using Entry = GradientAndVariable<T, placement::AdoptedVariable<T>>;
    using Step = std::decay_t<Update>;
    static_assert(
        requires { typename sync_type::template ListStep<ReplicaContext, Step, Entry>; },
        "strata: adopted variables need a sync policy with a list step "
        "(sync::Synchronous)");
    return typename sync_type::template ListStep<ReplicaContext, Step, Entry>(
        *this, std::forward<Update>(update), list);
  }
  template <class Update, std::floating_point T>
  requires std::invocable<Update&>
  auto begin_apply_gradients(
      Update&& update,
      const std::vector<GradientAndVariable<T, placement::AdoptedVariable<T>>>& list) {
    return begin_apply_gradients(
        std::forward<Update>(update),
        std::span<const GradientAndVariable<T, placement::AdoptedVariable<T>>>(list));
  }

 private:
  fusion::FusedAllReduce<communicator_type>& fused_all_reduce() {
    if (fusion_ != nullptr) return *fusion_;
    if (!own_fusion_) own_fusion_ = std::make_unique<fusion::FusedAllReduce<communicator_type>>();
    return *own_fusion_;
  }

  communicator_type* communicator_;
  fusion::FusedAllReduce<communicator_type>* fusion_;
  // Buckets for a context made without the strategy's (kept for this context's lifetime).
  std::unique_ptr<fusion::FusedAllReduce<communicator_type>> own_fusion_;
  sync_state_type* sync_state_;
  std::unique_ptr<sync_state_type> own_sync_state_;  // as own_fusion_
  int replica_;
  int num_replicas_;
  int local_replica_;
  int worker_;
  int num_workers_;
};

}  // namespace strata
