// strata/algorithms/reduce_ring.hpp — pipelined reduce to a root along a ring of messages.
//
// Computes  the root's output = op over all ranks' inputs; other ranks' outputs are untouched.
// Phases    root+1 sends its vector in segments to root+2; every rank combines each arriving
//           segment with its own input and forwards the partial result; the root combines
//           the last partial with its input.
// Cost      (n-1) hops of latency for the first segment, then one segment per hop time: S bytes
//           sent per rank, every reduction done once.
// Requires  agreed calls (count, op, root); scratch of S bytes on ranks between the ends.
// Determinism  fixed order (root+1, root+2, ..., root), independent of timing.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct ReduceRing {
  static constexpr std::string_view kName = "ring";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    const std::size_t bytes = call.count * self.element;
    if (self.alone(bytes)) return;
    const int position =
        detail::mod(self.rank - call.root - 1, self.size);  // root+1 is 0, the root n-1
    const bool first = position == 0;
    const bool root = position == self.size - 1;
    const detail::Range all{0, call.count};
    const std::size_t m = detail::segments_for(call.count, self.element, link.chunk_bytes());
    const std::size_t slot_bytes = (call.count + m - 1) / m * self.element;
    const auto slots = static_cast<std::size_t>(link.channels_per_peer());
    // Partial results live in scratch on the ranks between the ends: their outputs must not
    // change.
    std::byte* scratch = link.scratch(slots * slot_bytes + (first || root ? 0 : bytes));
    std::byte* partial = scratch + slots * slot_bytes;
    const int next = detail::mod(self.rank + 1, self.size);
    const int prev = detail::mod(self.rank - 1, self.size);
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    std::vector<detail::Range> parts;
    for (std::size_t k = 0; k < m; ++k) {
      const detail::Range part = detail::part_of(all, m, k);
      parts.push_back(part);
      if (!first)
        recvs.push_back({prev, scratch + (k % slots) * slot_bytes, part.size() * self.element, -1});
      if (!root)
        sends.push_back({next, (first ? self.in : partial) + part.begin * self.element,
                         part.size() * self.element, first ? -1 : static_cast<std::ptrdiff_t>(k)});
    }
    link.transfer(sends, recvs, [&](std::size_t k) {
      const detail::Range part = parts[k];
      std::byte* target = (root ? self.out : partial) + part.begin * self.element;
      detail::combine(call, target, recvs[k].data, self.in + part.begin * self.element,
                      part.size());
      if (root) detail::finish_mean(call, target, part.size(), self.size);
    });
  }
};

}  // namespace strata::algorithms
