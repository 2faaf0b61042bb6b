// strata/communicator/options.hpp — run-time tunables shared by every communicator.
#pragma once

#include <chrono>
#include <optional>

#include <strata/core/deadline.hpp>

namespace strata::communicator {

/// Options a communicator is created with. Plain data: set the fields you care about.
struct CommunicatorOptions {
  /// Deadline of every blocking call unless the call passes its own `CallOptions::timeout`.
  /// Defaults to `STRATA_TIMEOUT` when set, else 60 s (see `strata::default_timeout`).
  std::chrono::milliseconds timeout = default_timeout();
};

/// Per-call overrides, passed as the last argument of a collective.
struct CallOptions {
  /// This call's deadline budget; unset means `CommunicatorOptions::timeout`.
  std::optional<std::chrono::milliseconds> timeout{};
};

}  // namespace strata::communicator
