// strata/communicator/hierarchical.hpp — replicas in each process × processes over TCP.
#pragma once

#include <cstddef>
#include <exception>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce.hpp>

namespace strata::communicator {

/// k replicas (threads) in each of n worker processes, as one group of k·n ranks: TF's
/// MultiWorkerMirroredStrategy, where "each worker may have zero or more devices".
///
/// Rank g = worker · k + local replica. Each collective runs in three stages: among the local
/// replicas (LocalCommunicator, no copies beyond the algorithm's), across workers between the
/// local replicas 0 (TcpCommunicator), and back to the local replicas:
///   all_reduce      local reduce to replica 0 → TCP all-reduce → local broadcast
///   broadcast       local broadcast on the root's worker → TCP broadcast → local broadcast
///   reduce          local reduce → TCP reduce to the root's worker → hand-over to the root
///   all_gather      local all-gather into the worker's k blocks → TCP all-gather → local
///                   broadcast
///   reduce_scatter  local reduce → TCP reduce-scatter of k-block slices → local hand-out
///   barrier         local barrier → TCP barrier → local barrier
/// `mean` is a sum divided once, by k·n, at the end. All ranks agree bit for bit where the
/// flat collective would (the results are computed once and copied).
///
/// Failures: an error on any replica of any worker fails both the local group and the TCP
/// group, so every replica of every worker raises.
template <class Inter = TcpCommunicator>
class HierarchicalCommunicator : public detail::CollectiveApi<HierarchicalCommunicator<Inter>> {
  friend class detail::CollectiveApi<HierarchicalCommunicator>;
  using Intra = LocalCommunicator<>;

 public:
  static constexpr std::string_view kName = "hierarchical";
  static constexpr int kMaxSize = std::numeric_limits<int>::max();
  static constexpr bool kSpansProcesses = true;

  /// The local replicas of this process in `cluster` (as `strata::resolve_cluster()` found it:
  /// TF_CONFIG, torchrun, OpenMPI, SLURM, or a one-worker cluster); element l is local replica
  /// l. Takes over the cluster's listening socket, if any. Every worker must run the same
  /// number of replicas and the same `tcp` options.
  /// @throws ConfigurationError when workers run different numbers of replicas, or as
  /// membership_of and TcpCommunicator do.
  static std::vector<HierarchicalCommunicator> create(int local_replicas,
                                                      cluster::ResolvedCluster& resolved,
                                                      CommunicatorOptions options = {},
                                                      TcpOptions tcp = {}) {
    const bool chief = resolved.is_chief();
    Inter inter(membership_of(resolved), std::move(tcp), options);
    return create(local_replicas, std::move(inter), options, chief);
  }

  /// The local replicas of this process over an existing cross-worker communicator.
  static std::vector<HierarchicalCommunicator> create(int local_replicas, Inter inter,
                                                      CommunicatorOptions options, bool chief) {
    if (local_replicas < 1)
      throw UsageError(inter.rank(), "HierarchicalCommunicator::create",
                       fmt::format("a worker needs at least one replica, got {}", local_replicas),
                       "pass a positive number of local replicas");
    // Ranks are numbered worker · k + replica: every worker must agree on k.
    std::int64_t k[2] = {local_replicas, -local_replicas};
    inter.all_reduce(std::span<std::int64_t>(k), ReduceOp::max);
    if (k[0] != -k[1])
      throw ConfigurationError(inter.rank(), "HierarchicalCommunicator::create",
                               fmt::format("workers run between {} and {} local replicas (this "
                                           "worker {})",
                                           -k[1], k[0], local_replicas),
                               "start every worker with the same number of local replicas "
                               "(STRATA_LOCAL_REPLICAS or --local-replicas)");
    auto shared = std::make_shared<Shared>(std::move(inter), chief);
    auto locals = Intra::create(local_replicas, options);
    std::vector<HierarchicalCommunicator> ranks;
    for (auto& local : locals)
      ranks.push_back(HierarchicalCommunicator(shared, std::move(local)));
    return ranks;
  }

  HierarchicalCommunicator(HierarchicalCommunicator&&) noexcept = default;
  HierarchicalCommunicator& operator=(HierarchicalCommunicator&&) noexcept = default;
  ~HierarchicalCommunicator() = default;

  int rank() const noexcept { return worker_rank() * local_size() + local_rank(); }
  int size() const noexcept { return num_workers() * local_size(); }
  int local_rank() const noexcept { return state_->local.rank(); }
  int local_size() const noexcept { return state_->local.size(); }
  int worker_rank() const noexcept { return state_->shared->inter.rank(); }
  int num_workers() const noexcept { return state_->shared->inter.size(); }
  /// The chief worker (TF's rule: the chief task, else worker 0) writes checkpoints and logs.
  bool is_chief() const noexcept { return state_->shared->chief; }
  const CommunicatorOptions& options() const noexcept { return state_->local.options(); }
  /// The communicator between the workers (its options, e.g. `tcp_options()`).
  const Inter& inter_worker() const noexcept { return state_->shared->inter; }

  // all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier and their _async twins
  // come from detail::CollectiveApi (communicator/detail/collective_api.hpp).

  /// Fails the local group and the cross-worker group: every replica of every worker raises.
  void abort(std::string_view reason) noexcept {
    state_->local.abort(reason);
    state_->shared->inter.abort(reason);
  }

  /// Combines one value per process across the workers (op over workers), from the thread
  /// that drives the strategy between steps: Strategy::reduce uses it to reduce per-replica
  /// results over the whole cluster.
  template <Element T>
  void combine_across_workers(std::span<T> values, ReduceOp op) {
    state_->shared->inter.all_reduce(values, op);
  }

 private:
  struct Shared {
    Shared(Inter i, bool c) : inter(std::move(i)), chief(c) {}
    Inter inter;
    bool chief;
  };
  struct State {
    State(std::shared_ptr<Shared> s, Intra l) : shared(std::move(s)), local(std::move(l)) {}
    std::shared_ptr<Shared> shared;
    Intra local;
    std::vector<std::byte> scratch;
    std::vector<std::byte> handover;
    detail::SerialExecutor executor;  // last: destroyed first, finishing queued calls
  };

  HierarchicalCommunicator(std::shared_ptr<Shared> shared, Intra local)
      : state_(std::make_unique<State>(std::move(shared), std::move(local))) {}

  [[noreturn]] void fail_usage(Collective kind, std::string_view what,
                               std::string_view what_to_do) {
    UsageError error(rank(), to_string(kind), what, what_to_do);
    abort(error.what());
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    state_->executor.drain();
    execute(*state_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    auto work = std::make_shared<detail::WorkState>();
    State* state = state_.get();
    state->executor.post([state, call, options, work] {
      try {
        execute(*state, call, options);
        work->complete();
      } catch (...) {
        work->complete(std::current_exception());
      }
    });
    return Work(std::move(work));
  }

  static void execute(State& state, const CollectiveCall& call, const CallOptions& options) {
    try {
      dispatch(state, call, options);
    } catch (const std::exception& error) {
      // One failed stage (a strata::Error, or std::bad_alloc) must release every replica of
      // every worker.
      state.local.abort(error.what());
      state.shared->inter.abort(error.what());
      throw;
    }
  }

  template <class T>
  static std::span<T> span_of(void* data, std::size_t count) {
    return {static_cast<T*>(data), data == nullptr ? 0 : count};
  }
  template <class T>
  static std::span<const T> cspan_of(const void* data, std::size_t count) {
    return {static_cast<const T*>(data), data == nullptr ? 0 : count};
  }

  template <class T>
  static std::span<T> scratch(std::vector<std::byte>& buffer, std::size_t count) {
    if (buffer.size() < count * sizeof(T)) buffer.resize(count * sizeof(T));
    return {reinterpret_cast<T*>(buffer.data()), count};
  }

  static void dispatch(State& state, const CollectiveCall& call, const CallOptions& options) {
    visit_data_type(call.type,
                    [&]<class T>(std::type_identity<T>) { run_typed<T>(state, call, options); });
  }

  template <class T>
  static void run_typed(State& state, const CollectiveCall& call, const CallOptions& options) {
    Stages<T> stages(state, call, options);
    switch (call.kind) {
      case Collective::all_reduce:
        stages.all_reduce();
        break;
      case Collective::broadcast:
        stages.broadcast();
        break;
      case Collective::reduce:
        stages.reduce();
        break;
      case Collective::all_gather:
        stages.all_gather();
        break;
      case Collective::reduce_scatter:
        stages.reduce_scatter();
        break;
      case Collective::barrier:
        stages.barrier();
        break;
    }
  }

  /// One call's three stages (local, across workers, local), one member function per
  /// collective, over what they share.
  template <class T>
  struct Stages {
    Stages(State& s, const CollectiveCall& c, const CallOptions& o)
        : state(s),
          call(c),
          options(o),
          local(s.local),
          inter(s.shared->inter),
          leader(local.rank() == 0),
          k(local.size()),
          n(inter.size()),
          count(c.count),
          partial(c.op == ReduceOp::mean ? ReduceOp::sum : c.op),
          waiting(o) {
      // Replicas wait in the local stages while replica 0 talks to the other workers: their
      // budget covers both stages, and a failure there reaches them through abort().
      waiting.timeout = 2 * o.timeout.value_or(local.options().timeout);
    }

    void finish_mean(std::span<T> data) const {
      if (call.op == ReduceOp::mean && !data.empty())
        divide<T>(data, static_cast<std::size_t>(k) * static_cast<std::size_t>(n));
    }

    void all_reduce() {
      auto out = span_of<T>(call.recv, count);
      local.reduce(cspan_of<T>(call.send, count), leader ? out : std::span<T>{}, partial, 0,
                   options);
      if (leader) {
        inter.all_reduce(out, partial, options);
        finish_mean(out);
      }
      local.broadcast(out, 0, waiting);
    }

    void broadcast() {
      const int root_worker = call.root / k;
      const int root_local = call.root % k;
      auto out = span_of<T>(call.recv, count);
      if (inter.rank() == root_worker) {
        local.broadcast(cspan_of<T>(call.send, count), out, root_local, options);
        if (leader) inter.broadcast(out, root_worker, options);
      } else {
        if (leader) inter.broadcast(out, root_worker, options);
        local.broadcast(out, 0, waiting);
      }
    }

    void reduce() {
      const int root_worker = call.root / k;
      const int root_local = call.root % k;
      auto sum = scratch<T>(state.scratch, leader ? count : 0);
      local.reduce(cspan_of<T>(call.send, count), sum, partial, 0, options);
      if (leader) inter.reduce(sum, partial, root_worker, options);
      if (inter.rank() != root_worker) return;
      // Only the root's output changes: the result reaches it through a scratch buffer.
      auto copy = scratch<T>(state.handover, count);
      if (leader) std::copy(sum.begin(), sum.end(), copy.begin());
      local.broadcast(copy, 0, waiting);
      if (local.rank() == root_local) {
        auto out = span_of<T>(call.recv, count);
        std::copy(copy.begin(), copy.end(), out.begin());
        finish_mean(out);
      }
    }

    void all_gather() {
      auto out = span_of<T>(call.recv, count * static_cast<std::size_t>(k * n));
      auto mine = out.subspan(static_cast<std::size_t>(inter.rank() * k) * count,
                              static_cast<std::size_t>(k) * count);
      local.all_gather(cspan_of<T>(call.send, count), mine, options);
      if (leader) inter.all_gather(out, options);
      local.broadcast(out, 0, waiting);
    }

    void reduce_scatter() {
      const std::size_t total = count * static_cast<std::size_t>(k * n);
      auto sum = scratch<T>(state.scratch, leader ? total : 0);
      local.reduce(cspan_of<T>(call.send, total), sum, partial, 0, options);
      const std::size_t slice = count * static_cast<std::size_t>(k);
      auto worker_slice = scratch<T>(state.handover, slice);
      if (leader) {
        inter.reduce_scatter(std::span<const T>(sum), worker_slice, partial, options);
        finish_mean(worker_slice);
      }
      local.broadcast(worker_slice, 0, waiting);
      auto out = span_of<T>(call.recv, count);
      auto block = worker_slice.subspan(static_cast<std::size_t>(local.rank()) * count, count);
      std::copy(block.begin(), block.end(), out.begin());
    }

    void barrier() {
      local.barrier(options);
      if (leader) inter.barrier(options);
      local.barrier(waiting);
    }

    State& state;
    const CollectiveCall& call;
    const CallOptions& options;
    Intra& local;
    Inter& inter;
    const bool leader;
    const int k;  // replicas per worker
    const int n;  // workers
    const std::size_t count;
    const ReduceOp partial;  // what the stages combine with: a mean is a sum until the end
    CallOptions waiting;
  };

  std::unique_ptr<State> state_;
};

}  // namespace strata::communicator
