// strata/algorithms/all_gather_ring.hpp — pipelined ring all-gather over messages.
//
// Computes  block q of every rank's output = rank q's input (blocks of `count` elements).
// Phases    n-1 steps: in step t rank r sends block r-t to rank r+1 and receives block r-t-1
//           from rank r-1 straight into its output; each block travels as segments, and a
//           segment is forwarded as soon as it has arrived (in wavefront order,
//           detail::Wavefront).
// Cost      (n-1)·S bytes sent and received per rank for blocks of S bytes (bandwidth-
//           optimal); n-1 hops of latency.
// Requires  agreed calls (count).
// Determinism  a copy: bit-identical everywhere.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct AllGatherRing {
  static constexpr std::string_view kName = "ring";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    auto block = [&](int q) {
      const auto begin = static_cast<std::size_t>(detail::mod(q, self.size)) * call.count;
      return detail::Range{begin, begin + call.count};
    };
    detail::copy_if_distinct(self.out + block(self.rank).begin * self.element,
                             static_cast<const std::byte*>(call.send), call.count * self.element);
    if (self.size == 1) return;
    const std::size_t m = detail::segments_for(call.count, self.element, link.chunk_bytes());
    const int next = detail::mod(self.rank + 1, self.size);
    const int prev = detail::mod(self.rank - 1, self.size);
    const detail::Wavefront order(static_cast<std::size_t>(self.size - 1), m);
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const int t = static_cast<int>(order.step(i));
      const std::size_t k = order.segment(i);
      const detail::Range send_part = detail::part_of(block(self.rank - t), m, k);
      const detail::Range recv_part = detail::part_of(block(self.rank - t - 1), m, k);
      sends.push_back({next, self.out + send_part.begin * self.element,
                       send_part.size() * self.element, order.forwards(i)});
      recvs.push_back(
          {prev, self.out + recv_part.begin * self.element, recv_part.size() * self.element, -1});
    }
    link.transfer(sends, recvs, [](std::size_t) {});
  }
};

}  // namespace strata::algorithms
