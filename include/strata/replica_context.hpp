// strata/replica_context.hpp — what `Strategy::run` hands each replica, and what it returns.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/optim/optimizer.hpp>

namespace strata {

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

  /// `local_replica`: this replica's index among the replicas of this process (which copy of
  /// a mirrored variable it owns); `replica` and `num_replicas` place it in the whole cluster.
  ReplicaContext(communicator_type& communicator, int local_replica, int replica,
                 int num_replicas) noexcept
      : communicator_(&communicator),
        replica_(replica),
        num_replicas_(num_replicas),
        local_replica_(local_replica) {}

  /// This replica's index, 0 ≤ id < num_replicas_in_sync(), over every process of the
  /// cluster (worker · local replicas + local replica under MultiWorkerMirroredStrategy and
  /// ParameterServerStrategy).
  int replica_id_in_sync_group() const noexcept { return replica_; }
  int num_replicas_in_sync() const noexcept { return num_replicas_; }
  /// This replica's index among the replicas of this process.
  int local_replica_id() const noexcept { return local_replica_; }
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

 private:
  communicator_type* communicator_;
  int replica_;
  int num_replicas_;
  int local_replica_;
};

}  // namespace strata
