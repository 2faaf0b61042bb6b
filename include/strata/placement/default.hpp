// strata/placement/default.hpp — the pass-through placement of the default strategy.
#pragma once

#include <string_view>

#include <strata/placement/copies.hpp>

namespace strata::placement {

/// tf.distribute's default strategy: no distribution at all. `run` calls the function on the
/// calling thread, reductions are the identity, variables are plain buffers. What code gets
/// when it is written against the strategy API but nobody chose a strategy.
struct Default : SharedCopy {
  static constexpr std::string_view kName = "Default";
  static constexpr int kMaxReplicas = 1;
};

}  // namespace strata::placement
