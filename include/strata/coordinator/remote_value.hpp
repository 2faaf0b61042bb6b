// strata/coordinator/remote_value.hpp — the result of a scheduled function, once it has run.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>

#include <strata/config.hpp>
#include <strata/coordinator/codec.hpp>

namespace strata::coordinator {

namespace detail {
struct ClosureState;  // coordinator/impl/cluster_coordinator.ipp

/// Waits until the closure has run and returns its result's bytes; raises its error.
STRATA_DECL std::span<const std::byte> closure_result(const ClosureState& closure);
STRATA_DECL bool closure_finished(const ClosureState& closure);
}  // namespace detail

/// What `ClusterCoordinator::schedule` returns at once: the function's result, once a worker
/// has run it (TF's RemoteValue). Copies share the one result.
template <class T>
class RemoteValue {
 public:
  explicit RemoteValue(std::shared_ptr<const detail::ClosureState> closure)
      : closure_(std::move(closure)) {}

  /// True once the function has run or failed (or was cancelled).
  bool ready() const { return detail::closure_finished(*closure_); }

  /// Waits for the function and returns its result.
  /// @throws the function's error: FunctionError for an exception of the function, the strata
  ///   error it raised (e.g. PeerFailureError naming a ps task), CancelledError when it never
  ///   ran; TimeoutError when no scheduled function finished for the coordinator's
  ///   closure_timeout.
  T fetch() const {
    const auto bytes = detail::closure_result(*closure_);
    if constexpr (std::is_void_v<T>)
      return;
    else
      return from_bytes<T>(bytes);
  }

 private:
  std::shared_ptr<const detail::ClosureState> closure_;
};

}  // namespace strata::coordinator
