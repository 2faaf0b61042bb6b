// strata/transport/nccl/status.hpp — NCCL return codes as strata errors (the CUDA runtime's
// are in transport/cuda/status.hpp).
//
// A code that says the caller passed something wrong (an invalid pointer, device or argument)
// is a UsageError; one that says the machine lacks what the call needs (no device, no driver,
// out of memory) a ConfigurationError; a failure of a group in flight (a remote peer, a device
// fault, NCCL's internal errors) a PeerFailureError: the group cannot continue. Messages carry
// the runtime's own text (NCCL's last error when it has one).
#pragma once

#include <strata/config.hpp>

#if STRATA_HAS_NCCL

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nccl.h>

#include <strata/core/error.hpp>
#include <strata/transport/cuda/status.hpp>

namespace strata::transport::nccl {

/// Throws the strata error that `status` (neither ncclSuccess nor ncclInProgress) of `what`
/// means; `comm` (may be null) gives NCCL's last error text.
[[noreturn]] inline void raise_nccl(ncclResult_t status, ncclComm_t comm, int rank,
                                    std::string_view operation, std::string_view what) {
  const char* detail = ncclGetLastError(comm);
  std::string text = fmt::format("{} failed: {}", what, ncclGetErrorString(status));
  if (detail != nullptr && *detail != '\0') text += fmt::format(" ({})", detail);
  switch (status) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw UsageError(rank, operation, text,
                       "pass device memory of this rank's device, one GPU per rank, and the same "
                       "NCCL version on every rank");
    case ncclRemoteError:
      throw PeerFailureError(rank, operation, text);
    case ncclUnhandledCudaError:
    case ncclSystemError:
    case ncclInternalError:
    default:
      throw PeerFailureError(rank, operation, text);
  }
}

/// Checks an NCCL call; ncclInProgress (a non-blocking communicator still working) passes.
inline void check_nccl(ncclResult_t status, ncclComm_t comm, int rank, std::string_view operation,
                       std::string_view what) {
  if (status != ncclSuccess && status != ncclInProgress)
    raise_nccl(status, comm, rank, operation, what);
}

}  // namespace strata::transport::nccl

#endif  // STRATA_HAS_NCCL
