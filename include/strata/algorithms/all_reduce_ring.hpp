// strata/algorithms/all_reduce_ring.hpp — pipelined, chunked ring all-reduce over messages.
//
// Computes  every rank's output = op over all ranks' inputs.
// Phases    1. reduce-scatter: the buffer is cut into n chunks; in step t (0 ≤ t < n-1) rank r
//              sends chunk r-t to rank r+1 and receives chunk r-t-1 from rank r-1, reducing it
//              with its own input. After n-1 steps rank r holds chunk r+1 reduced over all.
//           2. all-gather: in step t rank r sends chunk r+1-t and receives chunk r-t straight
//              into its output.
//           Each chunk travels as m segments of at most chunk_bytes, and segment k of a
//           step is forwarded as soon as segment k of the previous step has arrived and been
//           reduced: sending, receiving and reducing all overlap. Messages go in wavefront
//           order (detail::Wavefront), so forwarded segments leave while still in cache.
// Cost      2(n-1)·m messages each way per rank; 2·(n-1)/n·S bytes sent and received per rank
//           (bandwidth-optimal); latency 2(n-1) hops: use recursive doubling for small S.
// Requires  agreed calls; n ≥ 1; scratch of channels_per_peer() segments.
// Determinism  bit-identical on every rank: each chunk is reduced by one rank per step along
//           the ring (chunk c in the order c, c+1, ..., c-1) and then copied.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>
#include <strata/algorithms/detail/partition.hpp>

namespace strata::algorithms {

struct AllReduceRing {
  static constexpr std::string_view kName = "ring";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    if (self.alone(call.count * self.element)) return;
    auto chunk = [&](int c) {
      const auto s =
          detail::slice_of(call.count, self.element, self.size, detail::mod(c, self.size));
      return detail::Range{s.begin, s.end};
    };
    std::size_t largest = 0;
    for (int c = 0; c < self.size; ++c)
      largest = std::max(largest, chunk(c).size());
    const std::size_t m = detail::segments_for(largest, self.element, link.chunk_bytes());
    const std::size_t slot_bytes = (largest + m - 1) / m * self.element;
    const auto slots = static_cast<std::size_t>(link.channels_per_peer());
    std::byte* scratch = link.scratch(slots * slot_bytes);

    const int next = detail::mod(self.rank + 1, self.size);
    const int prev = detail::mod(self.rank - 1, self.size);
    const std::size_t steps = 2 * static_cast<std::size_t>(self.size - 1);
    const std::size_t scatter_steps = static_cast<std::size_t>(self.size - 1);
    const detail::Wavefront order(steps, m);
    std::vector<transport::SendStep> sends(steps * m);
    std::vector<transport::RecvStep> recvs(steps * m);
    std::vector<detail::Range> recv_range(steps * m);
    for (std::size_t i = 0; i < steps * m; ++i) {
      const std::size_t t = order.step(i);
      const std::size_t k = order.segment(i);
      const bool scatter = t < scatter_steps;
      const int s = static_cast<int>(scatter ? t : t - scatter_steps);
      const detail::Range send_part =
          detail::part_of(chunk(scatter ? self.rank - s : self.rank + 1 - s), m, k);
      const detail::Range recv_part =
          detail::part_of(chunk(scatter ? self.rank - s - 1 : self.rank - s), m, k);
      // Step 0 sends raw input; later steps forward what the previous step produced.
      const std::byte* source = t == 0 ? self.in : self.out;
      sends[i] = {next, source + send_part.begin * self.element, send_part.size() * self.element,
                  order.forwards(i)};
      std::byte* target =
          scatter ? scratch + (i % slots) * slot_bytes : self.out + recv_part.begin * self.element;
      recvs[i] = {prev, target, recv_part.size() * self.element, -1};
      recv_range[i] = recv_part;
    }
    link.transfer(sends, recvs, [&](std::size_t j) {
      const std::size_t t = order.step(j);
      if (t >= scatter_steps) return;  // all-gather: the data is already in place
      const detail::Range part = recv_range[j];
      std::byte* target = self.out + part.begin * self.element;
      detail::combine(call, target, recvs[j].data, self.in + part.begin * self.element,
                      part.size());
      if (t + 1 == scatter_steps) detail::finish_mean(call, target, part.size(), self.size);
    });
  }
};

}  // namespace strata::algorithms
