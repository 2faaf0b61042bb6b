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
  static void run(Link& link) {
    const auto& call = link.call();
    const int n = link.size();
    const int r = link.rank();
    const std::size_t element = size_of(call.type);
    const auto* in = static_cast<const std::byte*>(call.send);
    auto* out = static_cast<std::byte*>(call.recv);
    const int position = detail::mod(r - call.root, n);
    if (position == 0) detail::copy_if_distinct(out, in, call.count * element);
    if (n == 1) return;
    const detail::Range all{0, call.count};
    const std::size_t m = detail::segments_for(call.count, element, link.max_message_bytes());
    const int next = detail::mod(r + 1, n);
    const int prev = detail::mod(r - 1, n);
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    for (std::size_t k = 0; k < m; ++k) {
      const detail::Range part = detail::part_of(all, m, k);
      if (position > 0)
        recvs.push_back({prev, out + part.begin * element, part.size() * element, -1});
      if (position < n - 1)
        sends.push_back({next, (position == 0 ? in : out) + part.begin * element,
                         part.size() * element,
                         position == 0 ? -1 : static_cast<std::ptrdiff_t>(k)});
    }
    link.transfer(sends, recvs, [](std::size_t) {});
  }
};

}  // namespace strata::algorithms
