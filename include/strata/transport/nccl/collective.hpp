// strata/transport/nccl/collective.hpp — a strata CollectiveCall as the NCCL call that runs it.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_NCCL

#include <cstdint>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <strata/core/collective.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/nccl/types.hpp>

namespace strata::transport::nccl {

/// Queues `call` on `stream` of `comm`, a group of `size` ranks; `barrier_byte` is one byte of
/// device memory of the rank's device, which a barrier all-reduces (NCCL has no barrier). Returns
/// NCCL's status: ncclInProgress while a non-blocking communicator is still enqueueing.
inline ncclResult_t enqueue_collective(const CollectiveCall& call, ncclComm_t comm,
                                       cudaStream_t stream, int size,
                                       std::uint8_t* barrier_byte) noexcept {
  const ncclDataType_t type = nccl_type(call.type);
  // The mean of one rank is its sum: NCCL 2.28's ncclAvg on a group of one leaves the last
  // elements of an out-of-place output unwritten (seen on an H200, docs/nccl.md).
  const ncclRedOp_t op = size == 1 && call.op == ReduceOp::mean ? ncclSum : nccl_op(call.op);
  switch (call.kind) {
    case Collective::all_reduce:
      return ncclAllReduce(call.send, call.recv, call.count, type, op, comm, stream);
    case Collective::broadcast:
      return ncclBroadcast(call.send, call.recv, call.count, type, call.root, comm, stream);
    case Collective::reduce:
      return ncclReduce(call.send, call.recv, call.count, type, op, call.root, comm, stream);
    case Collective::all_gather:
      return ncclAllGather(call.send, call.recv, call.count, type, comm, stream);
    case Collective::reduce_scatter:
      return ncclReduceScatter(call.send, call.recv, call.count, type, op, comm, stream);
    case Collective::barrier:
      return ncclAllReduce(barrier_byte, barrier_byte, 1, ncclUint8, ncclSum, comm, stream);
  }
  return ncclInvalidArgument;
}

}  // namespace strata::transport::nccl

#endif  // STRATA_HAS_NCCL
