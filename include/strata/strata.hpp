// strata/strata.hpp — everything in strata, one include.
//
// strata brings TensorFlow's tf.distribute strategies to C++ trainers as compile-time
// compositions Strategy<Placement, Communicator, Sync>. See README.md for a tour and
// strategies.hpp for the familiar aliases.
//
// The TCP transport's headers (transport/tcp/) are not listed: they are the implementation
// under communicator/tcp.hpp and resolve.hpp, which bring them in header-only and leave them in
// the strata::compiled library otherwise (config.hpp). Include them to extend the transport.
#pragma once

#include <strata/config.hpp>
#include <strata/fwd.hpp>

#include <strata/core/bfloat16.hpp>
#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/core/float16.hpp>
#include <strata/core/reduce.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/core/reduce_op.hpp>

#include <strata/algorithms/all_gather_direct.hpp>
#include <strata/algorithms/all_gather_ring.hpp>
#include <strata/algorithms/all_reduce_halving_doubling.hpp>
#include <strata/algorithms/all_reduce_recursive_doubling.hpp>
#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/algorithms/all_reduce_ring.hpp>
#include <strata/algorithms/all_reduce_scatter_gather.hpp>
#include <strata/algorithms/barrier_dissemination.hpp>
#include <strata/algorithms/broadcast_direct.hpp>
#include <strata/algorithms/broadcast_ring.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/algorithms/reduce_direct.hpp>
#include <strata/algorithms/reduce_ring.hpp>
#include <strata/algorithms/reduce_scatter_direct.hpp>
#include <strata/algorithms/reduce_scatter_ring.hpp>

#include <strata/cluster/address.hpp>
#include <strata/cluster/cluster_spec.hpp>
#include <strata/cluster/environment.hpp>
#include <strata/cluster/launcher_environment.hpp>
#include <strata/cluster/resolve.hpp>
#include <strata/cluster/slurm.hpp>
#include <strata/cluster/tf_config.hpp>

#include <strata/communicator/collective.hpp>
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/hierarchical.hpp>
#include <strata/communicator/local.hpp>
#include <strata/communicator/nccl.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/reduce_to_one_device.hpp>
#include <strata/communicator/replica_group.hpp>
#include <strata/communicator/self.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/communicator/work.hpp>

#include <strata/fusion/bucket_plan.hpp>
#include <strata/fusion/gradient_buckets.hpp>
#include <strata/fusion/gradient_ref.hpp>

#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/codec.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/coordinator/protocol.hpp>
#include <strata/coordinator/remote_value.hpp>
#include <strata/coordinator/worker_server.hpp>
#include <strata/serve_if_worker.hpp>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/checkpoint/manager.hpp>
#include <strata/checkpoint/safetensors.hpp>

#include <strata/data/batch_split.hpp>
#include <strata/data/sampler.hpp>
#include <strata/data/shard.hpp>
#include <strata/data/shuffle.hpp>

#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/optimizer.hpp>
#include <strata/optim/rules.hpp>
#include <strata/optim/sgd.hpp>

#include <strata/placement/central_storage.hpp>
#include <strata/placement/copies.hpp>
#include <strata/placement/default.hpp>
#include <strata/placement/device_variable.hpp>
#include <strata/placement/gpu_central_storage.hpp>
#include <strata/placement/gpu_mirrored.hpp>
#include <strata/placement/gpu_replicas.hpp>
#include <strata/placement/mirrored.hpp>
#include <strata/placement/one_device.hpp>
#include <strata/placement/parameter_server.hpp>
#include <strata/placement/placement.hpp>
#include <strata/placement/sharded_variable.hpp>
#include <strata/placement/variable.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/server.hpp>
#include <strata/ps/session.hpp>
#include <strata/ps/shard_placement.hpp>
#include <strata/serve_if_ps.hpp>

#include <strata/replica_context.hpp>
#include <strata/strategies.hpp>
#include <strata/strategy.hpp>

#include <strata/sync/asynchronous.hpp>
#include <strata/sync/bounded_staleness.hpp>
#include <strata/sync/sync.hpp>
#include <strata/sync/synchronous.hpp>
#include <strata/sync/synchronous_with_backups.hpp>

#include <strata/transport/cuda/device.hpp>
#include <strata/transport/cuda/kernels.hpp>
#include <strata/transport/cuda/status.hpp>
#include <strata/transport/local/group.hpp>
#include <strata/transport/local/link.hpp>
#include <strata/transport/nccl/collective.hpp>
#include <strata/transport/nccl/status.hpp>
#include <strata/transport/nccl/types.hpp>
#include <strata/transport/plan.hpp>

#include <strata/resolve.hpp>
