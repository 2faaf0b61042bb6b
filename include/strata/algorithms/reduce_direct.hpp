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
#include <strata/core/reduce.hpp>

namespace strata::algorithms {

struct ReduceDirect {
  static constexpr std::string_view kName = "direct";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    visit_data_type(mine.type, [&]<class T>(std::type_identity<T>) {
      // Phase 1: reduce my slice of every input into the root's output.
      const auto own = detail::slice_of(mine.count, sizeof(T), link.size(), link.rank());
      if (own.size() == 0) return;
      const auto inputs = detail::inputs_of<T>(link, own.begin);
      T* root_output = static_cast<T*>(link.peer_call(mine.root).recv) + own.begin;
      reduce_n<T>(std::span(root_output, own.size()), inputs, mine.op);
    });
  }
};

}  // namespace strata::algorithms
