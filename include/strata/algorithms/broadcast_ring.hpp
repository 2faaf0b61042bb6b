// strata/algorithms/broadcast_ring.hpp — pipelined broadcast along a ring of messages.
//
// Computes  every rank's output = the root's input.
// Phases    the root sends its vector in segments to root+1; every rank forwards each segment
//           to the next rank as soon as it has arrived; root-1 only receives.
// Cost      (n-1) hops of latency for the first segment, then one segment per hop time: about
//           S bytes sent and received per rank, whatever n.
// Requires  agreed calls (count, root).
// Determinism  a copy: bit-identical everywhere.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct BroadcastRing {
  static constexpr std::string_view kName = "ring";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    const int position = detail::mod(self.rank - call.root, self.size);
    if (position == 0) detail::copy_if_distinct(self.out, self.in, call.count * self.element);
    if (self.size == 1) return;
    const detail::Range all{0, call.count};
    const std::size_t m = detail::segments_for(call.count, self.element, link.chunk_bytes());
    const int next = detail::mod(self.rank + 1, self.size);
    const int prev = detail::mod(self.rank - 1, self.size);
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    for (std::size_t k = 0; k < m; ++k) {
      const detail::Range part = detail::part_of(all, m, k);
      if (position > 0)
        recvs.push_back(
            {prev, self.out + part.begin * self.element, part.size() * self.element, -1});
      if (position < self.size - 1)
        sends.push_back({next, (position == 0 ? self.in : self.out) + part.begin * self.element,
                         part.size() * self.element,
                         position == 0 ? -1 : static_cast<std::ptrdiff_t>(k)});
    }
    link.transfer(sends, recvs, [](std::size_t) {});
  }
};

}  // namespace strata::algorithms
