// strata/composition.hpp — what makes Strategy<Placement, Communicator, Sync> a valid
// composition, checked when the strategy is instantiated.
#pragma once

#include <concepts>

#include <strata/communicator/communicator.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/placement/placement.hpp>
#include <strata/sync/sync.hpp>

namespace strata {

/// The compile-time checks of Strategy<P, C, S>: a policy that lacks a member, and a
/// composition that cannot work, fail with a sentence that names what is missing or wrong and
/// what to use instead (the compile_fail tests hold the sentences to it).
template <class P, class C, class S>
struct Composition {
  static_assert(
      requires { P::kName; } && requires { P::kMaxReplicas; },
      "strata::Strategy: the placement lacks `static constexpr std::string_view kName` "
      "or `static constexpr int kMaxReplicas` (the most replicas it runs in one "
      "process); see placement::Placement.");
  static_assert(
      requires {
        { P::kUpdateSite } -> std::convertible_to<placement::UpdateSite>;
      },
      "strata::Strategy: the placement lacks `static constexpr UpdateSite "
      "kUpdateSite`, which tells the sync policy where updates are applied; see "
      "placement::Placement.");
  static_assert(placement::detail::PlacesVariablesOf<P, float>,
                "strata::Strategy: the placement lacks a member for variables: "
                "`variable_type<T>`, `create<T>(replicas, initial, aggregation)`, `read`, "
                "`write_target` or `apply`; see placement::Placement.");
  static_assert(communicator::Communicator<C>,
                "strata::Strategy: the communicator lacks a collective, `barrier`, `abort` or "
                "`kName`; see communicator::Communicator.");
  static_assert(communicator::detail::HasMaxSize<C>,
                "strata::Strategy: the communicator lacks `static constexpr int kMaxSize` (the "
                "most ranks its group holds); see communicator::ReplicaGroup.");
  static_assert(communicator::detail::SaysWhetherItSpansProcesses<C>,
                "strata::Strategy: the communicator lacks `static constexpr bool "
                "kSpansProcesses` (whether its group reaches other processes); see "
                "communicator::ReplicaGroup.");
  static_assert(communicator::ReplicaGroup<C>,
                "strata::Strategy: the communicator lacks `create`: `create(replicas, options)` "
                "in one process, or `create(local_replicas, cluster, options)`, `is_chief()` and "
                "`combine_across_workers(values, op)` across processes; see "
                "communicator::ReplicaGroup.");
  static_assert(sync::Sync<S>,
                "strata::Strategy: the sync policy lacks `static constexpr std::string_view "
                "kName` or `static constexpr bool kWaitsForAllReplicas`; see sync::Sync.");

  static_assert(
      !placement::kOnDevice<P> ||
          requires(const C& c) {
            { c.device() } -> std::convertible_to<int>;
          },
      "strata::Strategy: a GPU placement needs a communicator whose ranks say their CUDA "
      "device (`int device() const`): the placement puts each replica's copies there.");
  static_assert(placement::kOnDevice<P> == communicator::kDeviceMemory<C>,
                "strata::Strategy: the placement and the communicator disagree on where buffers "
                "live: a GPU placement (GpuMirrored, GpuCentralStorage) needs a communicator "
                "over device memory (NcclCommunicator, ReduceToOneDevice), and a CPU placement "
                "one over host memory.");

  static constexpr bool kManyReplicas = P::kMaxReplicas > 1;
  static constexpr bool kCommunicatorConnectsMany = C::kMaxSize > 1;

  static_assert(!(kManyReplicas && !kCommunicatorConnectsMany),
                "strata::Strategy: this placement runs several replicas that must exchange "
                "gradients, but the communicator connects a single replica; use "
                "LocalCommunicator (as MirroredStrategy and CentralStorageStrategy do), or "
                "OneDeviceStrategy for one replica.");
  static_assert(!(!kManyReplicas && kCommunicatorConnectsMany),
                "strata::Strategy: this placement runs exactly one replica, so a communicator "
                "between replicas would never carry anything; use SelfCommunicator (as "
                "OneDeviceStrategy and DefaultStrategy do).");
  static_assert(P::kUpdateSite != placement::UpdateSite::every_replica || S::kWaitsForAllReplicas ||
                    sync::kAveragesCopies<S>,
                "strata::Strategy: a placement with a copy per replica (Mirrored) stays "
                "consistent only if every update waits for all replicas, which this sync policy "
                "does not, or if the policy averages the copies itself; use Synchronous, "
                "LocalSgd, or a ParameterServer placement for asynchronous training.");
  static_assert(P::kUpdateSite != placement::UpdateSite::one_replica || S::kWaitsForAllReplicas,
                "strata::Strategy: a placement with one copy that every replica reads "
                "(CentralStorage, OneDevice) would be written by one replica while others read "
                "it under a sync policy that does not wait for all replicas; use Synchronous, or "
                "a ParameterServer placement, whose servers apply each update atomically.");

  static constexpr bool kChecked = true;
};

}  // namespace strata
