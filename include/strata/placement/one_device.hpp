// strata/placement/one_device.hpp — everything on one device, one replica.
#pragma once

#include <string_view>

#include <strata/placement/copies.hpp>

namespace strata::placement {

/// tf.distribute's OneDeviceStrategy placement: a single replica owns every variable. Useful
/// to run the training loop written for a distributed strategy on one device unchanged.
struct OneDevice : SharedCopy {
  static constexpr std::string_view kName = "OneDevice";
  static constexpr int kMaxReplicas = 1;
};

}  // namespace strata::placement
