// strata/placement/mirrored.hpp — a full copy of every variable on every replica.
#pragma once

#include <limits>
#include <string_view>

#include <strata/placement/copies.hpp>

namespace strata::placement {

/// tf.distribute's MirroredStrategy placement: each replica owns a full copy of every
/// variable; gradients are all-reduced and every replica applies the same update to its own
/// copy, so the copies stay identical (bit for bit: every replica receives the same reduced
/// gradient and runs the same optimizer arithmetic).
struct Mirrored : CopyPerReplica {
  static constexpr std::string_view kName = "Mirrored";
  static constexpr int kMaxReplicas = std::numeric_limits<int>::max();
};

}  // namespace strata::placement
