// strata/algorithms/all_reduce_scatter_gather.hpp — all-reduce where every rank reduces a slice.
//
// Computes  every rank's output = op over all ranks' inputs (in rank order), for ranks that
//           share an address space.
// Phases    1. reduce-scatter: rank r reduces slice r of all n inputs into slice r of its own
//              output (slices are ~S/n, cut on 64-byte boundaries).
//           2. all-gather:     rank r copies slice q of rank q's output, for every q ≠ r.
// Cost      2 synchronization points. Every rank reads about 2·S bytes and writes S, so the
//           work is spread evenly and no rank is a bottleneck: the choice for large S.
// Requires  host memory on every rank; agreed calls (count, type, op).
// Determinism  bit-identical results on every rank, and identical to AllReduceReduceToOne:
//           each element is reduced in rank order by exactly one rank.
#pragma once

#include <cstring>
#include <span>

#include <strata/algorithms/detail/partition.hpp>
#include <strata/core/reduce.hpp>
#include <strata/transport/local/link.hpp>

namespace strata::algorithms {

/// All-reduce policy: reduce-scatter, then all-gather, each rank owning one slice.
struct AllReduceScatterGather {
  static constexpr std::string_view kName = "scatter_gather";

  template <transport::local::SharedMemoryLink Link>
  static void run(Link& link) {
    const auto& mine = link.call(link.rank());
    visit_data_type(mine.type, [&]<class T>(std::type_identity<T>) {
      const int n = link.size();
      // Phase 1: reduce my slice of every input into my output.
      const auto own = detail::slice_of(mine.count, sizeof(T), n, link.rank());
      if (own.size() > 0) {
        const auto inputs = detail::inputs_of<T>(link, own.begin);
        reduce_n<T>(std::span(static_cast<T*>(mine.recv) + own.begin, own.size()), inputs, mine.op);
      }
      link.sync();
      // Phase 2: gather every other rank's reduced slice.
      for (int q = 0; q < n; ++q) {
        const auto theirs = detail::slice_of(mine.count, sizeof(T), n, q);
        if (q == link.rank() || theirs.size() == 0) continue;
        std::memcpy(static_cast<T*>(mine.recv) + theirs.begin,
                    static_cast<const T*>(link.call(q).recv) + theirs.begin,
                    theirs.size() * sizeof(T));
      }
    });
  }
};

}  // namespace strata::algorithms
