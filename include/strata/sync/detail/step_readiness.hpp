// strata/sync/detail/step_readiness.hpp — which gradients of a list-form step
// (ReplicaContext::begin_apply_gradients) the trainer has made ready.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::sync::detail {

/// One flag per gradient of the step. Not thread-safe: the step holds its lock around `mark`.
class StepReadiness {
 public:
  explicit StepReadiness(std::size_t gradients) : ready_(gradients, false) {}

  /// Gradient `i` is ready. @throws UsageError (naming `rank`) for an index out of range or a
  /// gradient ready twice.
  void mark(std::size_t i, int rank) {
    if (i >= ready_.size() || ready_[i])
      throw UsageError(rank, "apply_gradients",
                       i >= ready_.size()
                           ? fmt::format("gradient {} of a list of {}", i, ready_.size())
                           : fmt::format("gradient {} is ready twice in one step", i),
                       "make each gradient of the list ready once, then apply()");
    ready_[i] = true;
  }

  /// @throws UsageError naming the first gradient not made ready.
  void require_all(int rank) const {
    const auto missing = std::find(ready_.begin(), ready_.end(), false);
    if (missing != ready_.end())
      throw UsageError(
          rank, "apply_gradients",
          fmt::format("gradient {} of the list was not made ready", missing - ready_.begin()),
          "make every gradient of the list ready before apply()");
  }

 private:
  std::vector<bool> ready_;
};

}  // namespace strata::sync::detail
