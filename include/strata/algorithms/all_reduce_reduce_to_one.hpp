// strata/algorithms/all_reduce_reduce_to_one.hpp — all-reduce through one rank.
//
// Computes  every rank's output = op over all ranks' inputs (in rank order), for ranks that
//           share an address space. TF's `ReductionToOneDevice`.
// Phases    1. reduce:    rank 0 reduces all n inputs into its own output.
//           2. broadcast: every other rank copies rank 0's output into its own.
// Cost      2 synchronization points. Rank 0 reads n·S bytes and writes S; every other rank
//           reads S and writes S. Rank 0 is the bottleneck: use it where one device should own
//           the reduction (CentralStorage) or for small S, where one pass beats splitting.
// Requires  host memory on every rank; agreed calls (count, type, op).
// Determinism  bit-identical results on every rank, independent of timing.
#pragma once

#include <cstring>
#include <span>

#include <strata/algorithms/detail/partition.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/core/reduce_kernels.hpp>

namespace strata::algorithms {

/// All-reduce policy: gather to rank 0, reduce there, broadcast back.
struct AllReduceReduceToOne {
  static constexpr std::string_view kName = "reduce_to_one";

  template <SharedMemoryLink Link>
  static void run(Link& link, const CollectiveCall& mine) {
    const std::size_t count = mine.count;
    // Phase 1: rank 0 reduces every input into its output.
    if (link.rank() == 0 && count > 0) {
      const auto inputs = detail::inputs_of(link, 0, size_of(mine.type));
      kernels_of(mine).reduce_n(mine.recv, inputs.data(), inputs.size(), count, mine.op);
    }
    link.sync();
    // Phase 2: the others copy the result.
    if (link.rank() != 0 && count > 0)
      std::memcpy(mine.recv, link.peer_call(0).recv, count * size_of(mine.type));
  }
};

}  // namespace strata::algorithms
