// strata/strategies.hpp — the familiar tf.distribute names, as Strategy compositions.
//
// | alias                   | Placement      | Communicator                       | Sync        |
// |-------------------------|----------------|------------------------------------|-------------|
// | MirroredStrategy        | Mirrored       | LocalCommunicator<ScatterGather>   | Synchronous |
// | MultiWorkerMirrored...  | Mirrored       | HierarchicalCommunicator<Tcp>      | Synchronous |
// | CentralStorageStrategy  | CentralStorage | LocalCommunicator<ReduceToOne>     | Synchronous |
// | ParameterServerStrategy | ParameterServer| LocalCommunicator (this worker)    | Asynchronous|
// | OneDeviceStrategy       | OneDevice      | SelfCommunicator                   | Synchronous |
// | DefaultStrategy         | Default        | SelfCommunicator                   | Synchronous |
//
// and on GPUs, where strata is built with CUDA (STRATA_HAS_CUDA) and NCCL (STRATA_HAS_NCCL):
//
// | alias                      | Placement         | Communicator                      | Sync   |
// |----------------------------|-------------------|-----------------------------------|--------|
// | GpuMirroredStrategy        | GpuMirrored       | NcclCommunicator<Local>   (NCCL)  | Sync.  |
// | GpuMultiWorkerMirrored...  | GpuMirrored       | NcclCommunicator<Hierarchical>    | Sync.  |
// | GpuCentralStorageStrategy  | GpuCentralStorage | ReduceToOneDevice                 | Sync.  |
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
#include <strata/placement/parameter_server.hpp>
#include <strata/strategy.hpp>
#include <strata/sync/asynchronous.hpp>
#include <strata/sync/bounded_staleness.hpp>
#include <strata/sync/local_sgd.hpp>
#include <strata/sync/synchronous.hpp>
#include <strata/sync/synchronous_with_backups.hpp>

#if STRATA_HAS_CUDA
#include <strata/communicator/reduce_to_one_device.hpp>
#include <strata/placement/gpu_central_storage.hpp>
#include <strata/placement/gpu_mirrored.hpp>
#endif
#if STRATA_HAS_NCCL
#include <strata/communicator/nccl.hpp>
#endif

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

/// Asynchronous training against the parameter servers (ps tasks) of a cluster, TF's
/// ParameterServerStrategy with between-graph replication: every worker runs the training
/// loop, its replicas pull variables from the servers and push gradients, which the servers
/// apply with the optimizer as they arrive; no worker waits for another. The ps tasks run the
/// same program, which calls `strata::ps::serve_if_ps()` first (or `strata-ps`). Local replicas:
/// StrategyOptions::num_replicas, else STRATA_LOCAL_REPLICAS, else 1. Sharded variables, greedy
/// placement and worker-side optimizers: Strategy<placement::ParameterServer<...>, ...>;
/// bounded staleness or synchronous training (TF1's SyncReplicasOptimizer): the same with
/// sync::BoundedStaleness<k>, sync::Synchronous or sync::SynchronousWithBackups<b>.
using ParameterServerStrategy =
    Strategy<placement::ParameterServer<>, communicator::LocalCommunicator<>, sync::Asynchronous>;

/// One replica on one device: the distributed training loop, undistributed.
using OneDeviceStrategy =
    Strategy<placement::OneDevice, communicator::SelfCommunicator, sync::Synchronous>;

/// What code gets when nobody chose a strategy: pass-through, one replica, no copies.
using DefaultStrategy =
    Strategy<placement::Default, communicator::SelfCommunicator, sync::Synchronous>;

#if STRATA_HAS_CUDA
/// Variables kept once on the host, in pinned memory the replicas' kernels read; one replica
/// per GPU (several may share one), gradients reduced onto one GPU with a CUDA kernel
/// (ReductionToOneDevice) and applied once, on the CPU.
using GpuCentralStorageStrategy =
    Strategy<placement::GpuCentralStorage, communicator::ReduceToOneDevice, sync::Synchronous>;
#endif

#if STRATA_HAS_NCCL
/// MirroredStrategy on the GPUs of one process: one replica per GPU, variables and optimizer
/// state in device memory, gradients all-reduced by NCCL and applied on every GPU by a kernel.
using GpuMirroredStrategy =
    Strategy<placement::GpuMirrored,
             communicator::NcclCommunicator<communicator::LocalCommunicator<>>, sync::Synchronous>;

/// MultiWorkerMirroredStrategy on GPUs: every process of the cluster (resolve_cluster()) runs
/// its local replicas on its GPUs (one by default: STRATA_LOCAL_REPLICAS), NCCL all-reduces
/// the gradients of every replica of every process, and the TCP side group carries NCCL's
/// unique id, checks every call and names a dead process. Processes of one host take its GPUs
/// in the order of their local rank.
using GpuMultiWorkerMirroredStrategy =
    Strategy<placement::GpuMirrored,
             communicator::NcclCommunicator<communicator::HierarchicalCommunicator<>>,
             sync::Synchronous>;
#endif

}  // namespace strata
