// strata/algorithms/all_reduce_scatter_gather.hpp — all-reduce where every rank reduces a slice.
//
// Computes  every rank's output = op over all ranks' inputs (in rank order), for ranks that
//           share an address space.
// Phases    rank r reduces slice r of all n inputs (slices are ~S/n, cut on 64-byte
//           boundaries) piece by piece, and copies each piece into every other rank's output
//           while it is still in cache: reduce-scatter and all-gather in one pass.
// Cost      no synchronization beyond the call's own entry and exit. Every rank reads about
//           S bytes and writes S, so the work is spread evenly and no rank is a bottleneck:
//           the choice for large S. Against reducing first and gathering after a barrier,
//           that reads S/n·(n-1) bytes fewer per rank, none of them written by another core
//           (docs/performance.md).
// Requires  host memory on every rank; agreed calls (count, type, op).
// Determinism  bit-identical results on every rank, and identical to AllReduceReduceToOne:
//           each element is reduced in rank order by exactly one rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include <strata/algorithms/detail/partition.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/core/reduce_kernels.hpp>

namespace strata::algorithms {

/// All-reduce policy: each rank reduces one slice and writes it into every rank's output.
struct AllReduceScatterGather {
  static constexpr std::string_view kName = "scatter_gather";
  /// Reduced and copied at a time: small enough to stay in L2 between the two.
  static constexpr std::size_t kPieceBytes = std::size_t{64} << 10;

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    const int n = link.size();
    const int r = link.rank();
    const std::size_t element = size_of(mine.type);
    const auto own = detail::slice_of(mine.count, element, n, r);
    if (own.size() == 0) return;
    const ReduceKernels& kernels = kernels_of(mine);
    const std::vector<const void*> inputs = detail::inputs_of(link, 0, element);
    std::vector<std::byte*> outputs(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q)
      outputs[static_cast<std::size_t>(q)] = static_cast<std::byte*>(link.peer_call(q).recv);
    std::byte* const result = outputs[static_cast<std::size_t>(r)];
    std::vector<const void*> piece_inputs(inputs.size());
    const std::size_t piece = std::max<std::size_t>(1, kPieceBytes / element);
    for (std::size_t begin = own.begin; begin < own.end; begin += piece) {
      const std::size_t size = std::min(piece, own.end - begin);
      for (std::size_t q = 0; q < inputs.size(); ++q)
        piece_inputs[q] = static_cast<const std::byte*>(inputs[q]) + begin * element;
      kernels.reduce_n(result + begin * element, piece_inputs.data(), piece_inputs.size(), size,
                       mine.op);
      for (int q = 0; q < n; ++q)
        if (q != r)
          std::memcpy(outputs[static_cast<std::size_t>(q)] + begin * element,
                      result + begin * element, size * element);
    }
  }
};

}  // namespace strata::algorithms
