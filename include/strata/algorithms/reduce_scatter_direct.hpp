// strata/algorithms/reduce_scatter_direct.hpp — reduce-scatter, every rank reducing its block.
//
// Computes  rank r's output = op over all ranks' input block r (in rank order), for ranks
//           that share an address space.
// Phases    1. reduce: rank r reduces block r of all n inputs into its output.
// Cost      no synchronization point of its own. Every rank reads n·B bytes and writes B
//           (B = one output block), the minimum for a reduce-scatter.
// Requires  host memory; agreed calls (count, type, op). In place means rank r's output is
//           block r of its own input.
// Determinism  bit-identical to the all-reduce algorithms on the same block.
#pragma once

#include <span>

#include <strata/algorithms/detail/partition.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/core/reduce_kernels.hpp>

namespace strata::algorithms {

struct ReduceScatterDirect {
  static constexpr std::string_view kName = "direct";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    if (mine.count == 0) return;
    // Phase 1: reduce block r of every input into my output.
    const auto inputs = detail::inputs_of(link, static_cast<std::size_t>(link.rank()) * mine.count,
                                          size_of(mine.type));
    kernels_of(mine).reduce_n(mine.recv, inputs.data(), inputs.size(), mine.count, mine.op);
  }
};

}  // namespace strata::algorithms
