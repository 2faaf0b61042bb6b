// strata/algorithms/reduce_direct.hpp — reduce to a root, every rank reducing one slice.
//
// Computes  the root's output = op over all ranks' inputs (in rank order); other ranks'
//           outputs are left untouched. For ranks that share an address space.
// Phases    1. reduce: rank r reduces slice r of all n inputs into slice r of the root's
//              output (slices ~S/n, cut on 64-byte boundaries).
// Cost      no synchronization point of its own. Every rank reads about S bytes and writes
//           S/n: the root is not a bottleneck.
// Requires  host memory on every rank; agreed calls (count, type, op, root).
// Determinism  bit-identical to the all-reduce algorithms: each element is reduced in rank
//           order by exactly one rank.
#pragma once

#include <span>

#include <strata/algorithms/detail/partition.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/core/reduce_kernels.hpp>

namespace strata::algorithms {

struct ReduceDirect {
  static constexpr std::string_view kName = "direct";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    // Phase 1: reduce my slice of every input into the root's output.
    const std::size_t element = size_of(mine.type);
    const auto own = detail::slice_of(mine.count, element, link.size(), link.rank());
    if (own.size() == 0) return;
    const auto inputs = detail::inputs_of(link, own.begin, element);
    auto* root_output =
        static_cast<std::byte*>(link.peer_call(mine.root).recv) + own.begin * element;
    kernels_of(mine).reduce_n(root_output, inputs.data(), inputs.size(), own.size(), mine.op);
  }
};

}  // namespace strata::algorithms
