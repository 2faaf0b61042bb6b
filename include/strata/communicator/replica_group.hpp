// strata/communicator/replica_group.hpp — what a strategy needs of a communicator beyond the
// collectives: making one communicator per replica, and, for groups that span processes,
// which process is the chief and how per-process values combine.
#pragma once

#include <concepts>
#include <span>
#include <vector>

#include <strata/cluster/resolve.hpp>
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/options.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::communicator {

namespace detail {

template <class C>
concept HasMaxSize = requires {
  { C::kMaxSize } -> std::convertible_to<int>;
};

template <class C>
concept SaysWhetherItSpansProcesses = requires {
  { C::kSpansProcesses } -> std::convertible_to<bool>;
};

template <class C>
concept CreatesInProcess = requires(int replicas, CommunicatorOptions options) {
  { C::create(replicas, options) } -> std::same_as<std::vector<C>>;
};

template <class C>
concept CreatesForCluster = requires(int replicas, cluster::ResolvedCluster& cluster,
                                     CommunicatorOptions options) {
  { C::create(replicas, cluster, options) } -> std::same_as<std::vector<C>>;
};

template <class C>
concept CombinesAcrossProcesses = requires(C& c, const C& cc, std::span<float> values,
                                           ReduceOp op) {
  { cc.is_chief() } -> std::convertible_to<bool>;
  c.combine_across_workers(values, op);
};

}  // namespace detail

/// Whether communicator C takes buffers in memory a GPU reaches (C::kDeviceMemory): what a GPU
/// placement needs.
template <class C>
inline constexpr bool kDeviceMemory = [] {
  if constexpr (requires { C::kDeviceMemory; })
    return static_cast<bool>(C::kDeviceMemory);
  else
    return false;
}();

/// C models ReplicaGroup if a strategy can build and drive the communicators of its replicas:
///   1. C models Communicator (rank, size, the collectives, abort: a strategy aborts the group
///      when a replica throws);
///   2. `C::kMaxSize` (int) bounds the ranks of its group: 1 for a group of one, so that a
///      strategy can reject a placement that runs several replicas over it;
///   3. `C::kSpansProcesses` (bool) says whether its group reaches other processes; then
///   4a. across processes: `C::create(local_replicas, cluster, options)` returns this
///      process's communicators, one per local replica, for the `cluster::ResolvedCluster` the
///      strategy resolved (a communicator never resolves a cluster itself); `is_chief()` names
///      the process that writes checkpoints, and `combine_across_workers(values, op)` combines
///      one value per process across the processes (Strategy::reduce);
///   4b. in one process: `C::create(replicas, options)` returns the whole group, one per
///      replica.
/// Further arguments to `create` (e.g. TcpOptions) are the communicator's own settings, passed
/// through from the strategy's constructor.
template <class C>
concept ReplicaGroup = Communicator<C> && detail::HasMaxSize<C> &&
    detail::SaysWhetherItSpansProcesses<C> &&
    (C::kSpansProcesses ? (detail::CreatesForCluster<C>&& detail::CombinesAcrossProcesses<C>)
                        : detail::CreatesInProcess<C>);

}  // namespace strata::communicator
