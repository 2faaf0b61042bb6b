// strata/placement/placement.hpp — the Placement concept: where variables live.
#pragma once

#include <concepts>
#include <string_view>

namespace strata::placement {

/// P models Placement if:
///   1. `P::kName` (convertible to std::string_view) names it in messages;
///   2. `P::kMaxReplicas` (int) bounds the replicas it can run: 1 for single-device placements,
///      so that a strategy can reject a communicator between replicas that would never be used;
///   3. `P::kCopyPerReplica` (bool) says whether every replica owns a copy of each variable
///      (true: Mirrored — replicas must then apply identical updates at every step to stay
///      equal) or all replicas share one copy (false: CentralStorage, OneDevice, Default —
///      one replica applies the update and the others wait for it).
/// It leaves out devices (a later GPU placement maps replicas to CUDA devices) and sharding
/// over parameter servers, which bring their own requirements.
template <class P>
concept Placement = requires {
  { P::kName } -> std::convertible_to<std::string_view>;
  { P::kMaxReplicas } -> std::convertible_to<int>;
  { P::kCopyPerReplica } -> std::convertible_to<bool>;
};

}  // namespace strata::placement
