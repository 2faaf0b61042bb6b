// strata/transport/nccl/types.hpp — strata's element types and reductions as NCCL names them.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_NCCL

#include <nccl.h>

#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::transport::nccl {

/// NCCL's name of `type`: every strata element type has one.
constexpr ncclDataType_t nccl_type(DataType type) noexcept {
  switch (type) {
    case DataType::int8:
      return ncclInt8;
    case DataType::uint8:
      return ncclUint8;
    case DataType::int32:
      return ncclInt32;
    case DataType::int64:
      return ncclInt64;
    case DataType::float16:
      return ncclFloat16;
    case DataType::bfloat16:
      return ncclBfloat16;
    case DataType::float32:
      return ncclFloat32;
    case DataType::float64:
      return ncclFloat64;
  }
  return ncclUint8;
}

/// NCCL's reduction for `op`; mean is ncclAvg (integers: the sum divided, truncated, as the
/// CPU communicators do).
constexpr ncclRedOp_t nccl_op(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::product:
      return ncclProd;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::mean:
      return ncclAvg;
  }
  return ncclSum;
}

}  // namespace strata::transport::nccl

#endif  // STRATA_HAS_NCCL
