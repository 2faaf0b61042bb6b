// strata/algorithms/reduce_scatter_ring.hpp — pipelined ring reduce-scatter over messages.
//
// Computes  rank r's output = op over block r of all ranks' inputs (blocks of `count`).
// Phases    n-1 steps: in step t rank r sends block r-t-1 (its input at t = 0, else the
//           partial it made in step t-1) to rank r+1, and receives block r-t-2 from rank r-1,
//           combining it with its own input; the last step yields block r, written to the
//           output. Segments are forwarded as soon as they are combined.
// Cost      (n-1)/n·(n·S) bytes sent per rank for outputs of S bytes; n-1 hops of latency.
// Requires  agreed calls (count, op); scratch of n blocks for partial results (inputs and
//           the rest of an in-place buffer stay untouched).
// Determinism  fixed order along the ring (block q: q+1, q+2, ..., q), independent of timing.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct ReduceScatterRing {
  static constexpr std::string_view kName = "ring";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    auto block = [&](int q) {
      const auto begin = static_cast<std::size_t>(detail::mod(q, self.size)) * call.count;
      return detail::Range{begin, begin + call.count};
    };
    if (self.alone(call.count * self.element)) return;
    const std::size_t m = detail::segments_for(call.count, self.element, link.chunk_bytes());
    const std::size_t slot_bytes = (call.count + m - 1) / m * self.element;
    const auto slots = static_cast<std::size_t>(link.channels_per_peer());
    const std::size_t total = static_cast<std::size_t>(self.size) * call.count * self.element;
    std::byte* scratch = link.scratch(slots * slot_bytes + total);
    std::byte* partial = scratch + slots * slot_bytes;  // indexed like the input
    const int next = detail::mod(self.rank + 1, self.size);
    const int prev = detail::mod(self.rank - 1, self.size);
    const detail::Wavefront order(static_cast<std::size_t>(self.size - 1), m);
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    std::vector<detail::Range> recv_parts;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int t = static_cast<int>(order.step(i));
      const std::size_t k = order.segment(i);
      const detail::Range send_part = detail::part_of(block(self.rank - t - 1), m, k);
      const detail::Range recv_part = detail::part_of(block(self.rank - t - 2), m, k);
      sends.push_back({next, (t == 0 ? self.in : partial) + send_part.begin * self.element,
                       send_part.size() * self.element, order.forwards(i)});
      recvs.push_back(
          {prev, scratch + (i % slots) * slot_bytes, recv_part.size() * self.element, -1});
      recv_parts.push_back(recv_part);
    }
    const auto last_step = static_cast<std::size_t>(self.size - 2);
    const std::size_t own_begin = block(self.rank).begin;
    link.transfer(sends, recvs, [&](std::size_t j) {
      const detail::Range part = recv_parts[j];
      const bool last = order.step(j) == last_step;
      std::byte* target = last ? self.out + (part.begin - own_begin) * self.element
                               : partial + part.begin * self.element;
      detail::combine(call, target, recvs[j].data, self.in + part.begin * self.element,
                      part.size());
      if (last) detail::finish_mean(call, target, part.size(), self.size);
    });
  }
};

}  // namespace strata::algorithms
