// strata/communicator/hierarchical.hpp — replicas in each process × processes over TCP.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
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
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_kernels.hpp>

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
  friend struct detail::CallAccess;
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
    // Ranks are numbered worker · k + replica: every worker must agree on k. Gathered, not
    // all-reduced: no int64 kernels in every unit that makes a hierarchy.
    const std::int64_t mine = local_replicas;
    std::vector<std::int64_t> all(static_cast<std::size_t>(inter.size()));
    inter.all_gather(std::span<const std::int64_t>(&mine, 1), std::span(all));
    const auto [fewest, most] = std::minmax_element(all.begin(), all.end());
    if (*fewest != *most)
      throw ConfigurationError(inter.rank(), "HierarchicalCommunicator::create",
                               fmt::format("workers run between {} and {} local replicas (this "
                                           "worker {})",
                                           *fewest, *most, local_replicas),
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
    try {
      fail(abort_failure(rank(), reason,
                         fmt::format("worker {}, replica {}", worker_rank(), local_rank())));
    } catch (...) {
      fail(std::current_exception());
    }
  }

  /// Fails both groups because of `error`: every replica of every worker raises its root cause.
  void fail(const std::exception_ptr& error) noexcept {
    fail_group(state_->local, error);
    fail_group(state_->shared->inter, error);
  }

  /// Raises the group's failure, without waiting, when a local replica or another worker
  /// failed it or a worker's connections closed: for a caller that waits on something else
  /// between calls (NcclCommunicator watches its side group with it). Only local replica 0
  /// reads the workers' connections, which take one thread at a time; it is the replica that
  /// runs the cross-worker stage of every collective.
  void check_peers() {
    state_->local.check_peers();
    if (local_rank() == 0) state_->shared->inter.check_peers();
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
    fail(std::make_exception_ptr(error));
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    state_->executor.drain();
    execute(*state_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    State* state = state_.get();
    return state->executor.submit([state, call, options] { execute(*state, call, options); });
  }

  static void execute(State& state, const CollectiveCall& call, const CallOptions& options) {
    try {
      dispatch(state, call, options);
    } catch (...) {
      // One failed stage (a strata::Error, or std::bad_alloc) must release every replica of
      // every worker.
      fail_group(state.local, std::current_exception());
      fail_group(state.shared->inter, std::current_exception());
      throw;
    }
  }

  static void dispatch(State& state, const CollectiveCall& call, const CallOptions& options) {
    Stages stages(state, call, options);
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

  /// `bytes` bytes of `buffer`, grown as needed.
  static std::byte* scratch(std::vector<std::byte>& buffer, std::size_t bytes) {
    if (buffer.size() < bytes) buffer.resize(bytes);
    return buffer.data();
  }

  /// One call's three stages (local, across workers, local), one member function per
  /// collective. Each stage is a call of the same element type on one of the two parts, built
  /// here from the checked call and run through CallAccess: nothing here depends on the type.
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
          element(size_of(c.type)),
          partial(c.op == ReduceOp::mean ? ReduceOp::sum : c.op),
          waiting(o) {
      // Replicas wait in the local stages while replica 0 talks to the other workers: their
      // budget covers both stages, and a failure there reaches them through abort().
      waiting.timeout = 2 * o.timeout.value_or(local.options().timeout);
    }

    /// `kind` over `elements` elements of the call's type, from `send` into `recv`.
    CollectiveCall stage(Collective kind, std::size_t elements, const void* send, void* recv,
                         int root = 0) const {
      CollectiveCall part = call;
      part.kind = kind;
      part.count = elements;
      part.op = partial;
      part.root = root;
      part.send = send;
      part.recv = recv;
      return part;
    }

    template <class Part>
    static void run(Part& part, const CollectiveCall& stage_call, const CallOptions& on) {
      detail::CallAccess::run(part, stage_call, on);
    }

    void finish_mean(void* data, std::size_t elements) const {
      if (call.op == ReduceOp::mean && elements > 0)
        kernels_of(call).divide(data, elements,
                                static_cast<std::size_t>(k) * static_cast<std::size_t>(n));
    }

    void all_reduce() {
      void* out = call.recv;
      run(local, stage(Collective::reduce, count, call.send, leader ? out : nullptr), options);
      if (leader) {
        run(inter, stage(Collective::all_reduce, count, out, out), options);
        finish_mean(out, count);
      }
      run(local, stage(Collective::broadcast, count, out, out), waiting);
    }

    void broadcast() {
      const int root_worker = call.root / k;
      const int root_local = call.root % k;
      void* out = call.recv;
      if (inter.rank() == root_worker) {
        run(local, stage(Collective::broadcast, count, call.send, out, root_local), options);
        if (leader) run(inter, stage(Collective::broadcast, count, out, out, root_worker), options);
      } else {
        if (leader) run(inter, stage(Collective::broadcast, count, out, out, root_worker), options);
        run(local, stage(Collective::broadcast, count, out, out), waiting);
      }
    }

    void reduce() {
      const int root_worker = call.root / k;
      const int root_local = call.root % k;
      const std::size_t bytes = count * element;
      std::byte* sum = leader ? scratch(state.scratch, bytes) : nullptr;
      run(local, stage(Collective::reduce, count, call.send, sum), options);
      if (leader) run(inter, stage(Collective::reduce, count, sum, sum, root_worker), options);
      if (inter.rank() != root_worker) return;
      // Only the root's output changes: the result reaches it through a scratch buffer.
      std::byte* copy = scratch(state.handover, bytes);
      if (leader && bytes > 0) std::memcpy(copy, sum, bytes);
      run(local, stage(Collective::broadcast, count, copy, copy), waiting);
      if (local.rank() == root_local) {
        if (bytes > 0) std::memcpy(call.recv, copy, bytes);
        finish_mean(call.recv, count);
      }
    }

    void all_gather() {
      auto* out = static_cast<std::byte*>(call.recv);
      const std::size_t worker_block = static_cast<std::size_t>(k) * count;
      std::byte* mine = out + static_cast<std::size_t>(inter.rank()) * worker_block * element;
      run(local, stage(Collective::all_gather, count, call.send, mine), options);
      if (leader) run(inter, stage(Collective::all_gather, worker_block, mine, out), options);
      run(local, stage(Collective::broadcast, worker_block * static_cast<std::size_t>(n), out, out),
          waiting);
    }

    void reduce_scatter() {
      const std::size_t total = count * static_cast<std::size_t>(k * n);
      std::byte* sum = leader ? scratch(state.scratch, total * element) : nullptr;
      run(local, stage(Collective::reduce, total, call.send, sum), options);
      const std::size_t slice = count * static_cast<std::size_t>(k);
      std::byte* worker_slice = scratch(state.handover, slice * element);
      if (leader) {
        run(inter, stage(Collective::reduce_scatter, slice, sum, worker_slice), options);
        finish_mean(worker_slice, slice);
      }
      run(local, stage(Collective::broadcast, slice, worker_slice, worker_slice), waiting);
      if (count > 0)
        std::memcpy(call.recv,
                    worker_slice + static_cast<std::size_t>(local.rank()) * count * element,
                    count * element);
    }

    void barrier() {
      run(local, CollectiveCall{}, options);
      if (leader) run(inter, CollectiveCall{}, options);
      run(local, CollectiveCall{}, waiting);
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
    const std::size_t element;  // bytes per element
    const ReduceOp partial;     // what the stages combine with: a mean is a sum until the end
    CallOptions waiting;
  };

  std::unique_ptr<State> state_;
};

}  // namespace strata::communicator
