// strata/transport/cuda/status.hpp — CUDA runtime return codes as strata errors.
//
// A code that says the caller passed something wrong (an invalid pointer, device or argument)
// is a UsageError; one that says the machine lacks what the call needs (no device, no driver,
// out of memory) a ConfigurationError; any other failure of the device a PeerFailureError: the
// group that uses it cannot continue. Messages carry the runtime's own text.
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_CUDA

#include <string>
#include <string_view>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::transport::cuda {

/// Throws the strata error that `status` (not cudaSuccess) of `what` means for `rank` in
/// `operation`.
[[noreturn]] inline void raise_cuda(cudaError_t status, int rank, std::string_view operation,
                                    std::string_view what) {
  const std::string text =
      fmt::format("{} failed: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
  switch (status) {
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      throw UsageError(rank, operation, text,
                       "pass device memory of this rank's CUDA device, and a valid device index");
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorMemoryAllocation:
      throw ConfigurationError(rank, operation, text,
                               "run on a machine with a CUDA device and its driver, with enough "
                               "free device memory");
    default:
      throw PeerFailureError(rank, operation, text,
                             "the device failed: restart the job (or re-create the group)");
  }
}

/// Checks a CUDA runtime call.
inline void check_cuda(cudaError_t status, int rank, std::string_view operation,
                       std::string_view what) {
  if (status != cudaSuccess) raise_cuda(status, rank, operation, what);
}

}  // namespace strata::transport::cuda

#endif  // STRATA_HAS_CUDA
