// strata/algorithms/all_gather_direct.hpp — all-gather by copying straight from every rank.
//
// Computes  every rank's output block q = rank q's input (count elements each), for ranks
//           that share an address space.
// Phases    1. copy: rank r copies every rank's input into its output block of that rank
//              (skipping its own block when it is already in place).
// Cost      no synchronization point of its own. Every rank reads and writes n·S bytes
//           (S = one rank's contribution), the minimum for an all-gather.
// Requires  host memory; agreed calls (count, type). In place means rank r's input is block r
//           of its own output.
// Determinism  exact copy.
#pragma once

#include <cstring>

#include <strata/algorithms/link.hpp>

namespace strata::algorithms {

struct AllGatherDirect {
  static constexpr std::string_view kName = "direct";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    const std::size_t block = mine.count * size_of(mine.type);
    if (block == 0) return;
    // Phase 1: copy every rank's contribution into its block.
    for (int q = 0; q < link.size(); ++q) {
      auto* destination = static_cast<std::byte*>(mine.recv) + static_cast<std::size_t>(q) * block;
      const void* source = link.peer_call(q).send;
      if (destination != source) std::memcpy(destination, source, block);
    }
  }
};

}  // namespace strata::algorithms
