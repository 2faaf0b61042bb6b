// strata/placement/central_storage.hpp — one host copy of every variable, replicas compute.
#pragma once

#include <limits>
#include <string_view>

#include <strata/placement/copies.hpp>

namespace strata::placement {

/// tf.distribute's CentralStorageStrategy placement: variables live once, on the host;
/// every replica reads that copy, gradients are reduced into one place and the update is
/// applied once. Saves memory per replica at the cost of funnelling updates through one copy.
struct CentralStorage : SharedCopy {
  static constexpr std::string_view kName = "CentralStorage";
  static constexpr int kMaxReplicas = std::numeric_limits<int>::max();
};

}  // namespace strata::placement
