// strata/algorithms/broadcast_direct.hpp — broadcast by copying straight from the root.
//
// Computes  every rank's output = the root's input, for ranks that share an address space.
// Phases    1. copy: every rank whose output is not the root's input copies it.
// Cost      no synchronization point of its own. Every rank reads and writes S bytes; the
//           root's buffer is read by n-1 ranks at once (it stays in the shared cache).
// Requires  host memory on every rank; agreed calls (count, type, root).
// Determinism  exact copy.
#pragma once

#include <cstring>

#include <strata/algorithms/link.hpp>

namespace strata::algorithms {

struct BroadcastDirect {
  static constexpr std::string_view kName = "direct";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    const auto& root = link.peer_call(mine.root);
    const std::size_t bytes = mine.count * size_of(mine.type);
    // Phase 1: copy from the root's input.
    if (bytes > 0 && mine.recv != root.send) std::memcpy(mine.recv, root.send, bytes);
  }
};

}  // namespace strata::algorithms
