// strata/strategies.hpp — the familiar tf.distribute names, as Strategy compositions.
//
// | alias                   | Placement      | Communicator                       | Sync        |
// |-------------------------|----------------|------------------------------------|-------------|
// | MirroredStrategy        | Mirrored       | LocalCommunicator<ScatterGather>   | Synchronous |
// | MultiWorkerMirrored...  | Mirrored       | HierarchicalCommunicator<Tcp>      | Synchronous |
// | CentralStorageStrategy  | CentralStorage | LocalCommunicator<ReduceToOne>     | Synchronous |
// | OneDeviceStrategy       | OneDevice      | SelfCommunicator                   | Synchronous |
// | DefaultStrategy         | Default        | SelfCommunicator                   | Synchronous |
//
// Switching strategy is changing one alias; the training loop stays as it is.
#pragma once

#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/algorithms/all_reduce_scatter_gather.hpp>
#include <strata/communicator/hierarchical.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/self.hpp>
#include <strata/placement/central_storage.hpp>
#include <strata/placement/default.hpp>
#include <strata/placement/mirrored.hpp>
#include <strata/placement/one_device.hpp>
#include <strata/strategy.hpp>
#include <strata/sync/synchronous.hpp>

namespace strata {

/// Synchronous data parallelism over the replicas (threads) of one process, a copy of every
/// variable per replica, gradients all-reduced with every replica reducing one slice.
using MirroredStrategy =
    Strategy<placement::Mirrored,
             communicator::LocalCommunicator<algorithms::AllReduceScatterGather>,
             sync::Synchronous>;

/// Synchronous data parallelism over the replicas of every worker process of a cluster:
/// replicas (threads) of one process reduce among themselves, workers over TCP. The cluster
/// comes from `resolve_cluster()` (TF_CONFIG, torchrun, OpenMPI, SLURM; nothing set: one
/// worker, which behaves as MirroredStrategy). Local replicas: StrategyOptions::num_replicas,
/// else STRATA_LOCAL_REPLICAS, else 1. `is_chief()` tells the worker that writes checkpoints.
using MultiWorkerMirroredStrategy =
    Strategy<placement::Mirrored, communicator::HierarchicalCommunicator<>, sync::Synchronous>;

/// Variables kept once on the host; replicas compute, gradients are reduced to one place
/// (TF's ReductionToOneDevice) and applied once.
using CentralStorageStrategy =
    Strategy<placement::CentralStorage,
             communicator::LocalCommunicator<algorithms::AllReduceReduceToOne>, sync::Synchronous>;

/// One replica on one device: the distributed training loop, undistributed.
using OneDeviceStrategy =
    Strategy<placement::OneDevice, communicator::SelfCommunicator, sync::Synchronous>;

/// What code gets when nobody chose a strategy: pass-through, one replica, no copies.
using DefaultStrategy =
    Strategy<placement::Default, communicator::SelfCommunicator, sync::Synchronous>;

}  // namespace strata
