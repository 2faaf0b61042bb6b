// strata/algorithms/all_reduce_recursive_doubling.hpp — latency-optimised all-reduce for small
// messages, correct for any group size.
//
// Computes  every rank's output = op over all ranks' inputs.
// Phases    Let p be the largest power of two ≤ n and e = n - p.
//           1. fold: for r < 2e, even rank r sends its vector to r+1, which combines them;
//              even ranks then wait. The p remaining ranks get virtual ranks 0..p-1.
//           2. log2(p) rounds: in round k each remaining rank exchanges its whole vector with
//              the rank whose virtual rank differs in bit k, and both combine the two.
//           3. unfold: odd ranks r < 2e send the result to r-1.
//           Vectors larger than chunk_bytes travel as segments; segment k of a round
//           goes out as soon as segment k of the previous round is combined.
// Cost      ⌈log2 n⌉ (+2 when n is not a power of two) message latencies; S·log2(p) bytes
//           sent per rank: the choice when latency dominates (small S).
//           Out of place, the input is read where it lies: the first combine writes the output.
// Requires  agreed calls; scratch of S bytes per receive round.
// Determinism  bit-identical on every rank: both partners combine (lower virtual rank's
//           vector, higher's) in that order, so they compute the same tree.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct AllReduceRecursiveDoubling {
  static constexpr std::string_view kName = "recursive_doubling";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    const std::size_t bytes = call.count * self.element;
    if (self.alone(bytes)) return;

    int p = 1;
    while (p * 2 <= self.size)
      p *= 2;
    const int extra = self.size - p;
    const detail::Range all{0, call.count};
    const std::size_t m = detail::segments_for(call.count, self.element, link.chunk_bytes());

    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    struct Combine {
      detail::Range part;
      bool received_first;  // the received vector belongs to the lower virtual rank
      bool last;            // the last combine of this rank: finish a mean here
      // This rank's side: its input for the first combine, which writes `out` (so out of
      // place nothing copies the input first), then `out`.
      const std::byte* mine;
    };
    std::vector<Combine> combines;
    // Receive round i of this rank has its own scratch region: rounds from different peers
    // may arrive before the previous round is combined.
    int rounds = 0;
    for (int mask = 1; mask < p; mask <<= 1)
      ++rounds;
    const bool folded_away = self.rank < 2 * extra && self.rank % 2 == 0;
    const bool folds_in = self.rank < 2 * extra && self.rank % 2 == 1;
    const int receive_rounds = folded_away ? 0 : rounds + (folds_in ? 1 : 0);
    std::byte* scratch = link.scratch(static_cast<std::size_t>(receive_rounds) * bytes);
    int round = 0;
    auto previous_recv = [&](std::size_t k) -> std::ptrdiff_t {
      return recvs.size() < m ? -1 : static_cast<std::ptrdiff_t>(recvs.size() - m + k);
    };

    if (folded_away) {  // phases 1 and 3 of an even rank: hand the vector over, get the result
      std::vector<detail::Range> parts(m);
      for (std::size_t k = 0; k < m; ++k)
        parts[k] = detail::part_of(all, m, k);
      detail::fold_away(link, self.rank + 1, self.in, self.out, parts, self.element);
      return;
    }
    const int virtual_rank = folds_in ? self.rank / 2 : self.rank - extra;
    auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
    // This rank's vector: its input until the first combine, `out` after it.
    const std::byte* mine = self.in;
    auto receive_round = [&](int from, bool received_first, bool last,
                             const std::vector<std::ptrdiff_t>& after_send) {
      std::byte* region = scratch + static_cast<std::size_t>(round++) * bytes;
      for (std::size_t k = 0; k < m; ++k) {
        const detail::Range part = detail::part_of(all, m, k);
        // The combine overwrites `out`: it waits for a send of this round that reads `out`.
        recvs.push_back({from, region + part.begin * self.element, part.size() * self.element,
                         mine == self.out ? after_send[k] : -1});
        combines.push_back({part, received_first, last, mine});
      }
      mine = self.out;
    };
    const std::vector<std::ptrdiff_t> no_send(m, -1);
    if (folds_in) receive_round(self.rank - 1, /*received_first=*/true, rounds == 0, no_send);
    int k_round = 0;
    for (int mask = 1; mask < p; mask <<= 1, ++k_round) {
      const int partner_virtual = virtual_rank ^ mask;
      const int partner = real_rank(partner_virtual);
      std::vector<std::ptrdiff_t> my_sends(m);
      for (std::size_t k = 0; k < m; ++k) {
        const detail::Range part = detail::part_of(all, m, k);
        my_sends[k] = static_cast<std::ptrdiff_t>(sends.size());
        sends.push_back({partner, mine + part.begin * self.element, part.size() * self.element,
                         previous_recv(k)});
      }
      receive_round(partner, partner_virtual < virtual_rank, mask * 2 >= p, my_sends);
    }
    if (folds_in)
      for (std::size_t k = 0; k < m; ++k) {
        const detail::Range part = detail::part_of(all, m, k);
        sends.push_back({self.rank - 1, self.out + part.begin * self.element,
                         part.size() * self.element, previous_recv(k)});
      }
    link.transfer(sends, recvs, [&](std::size_t j) {
      const Combine& c = combines[j];
      detail::combine_partials(call.type, self.out + c.part.begin * self.element,
                               c.mine + c.part.begin * self.element, recvs[j].data,
                               c.received_first, c.part.size(), call.op, c.last, self.size);
    });
  }
};

}  // namespace strata::algorithms
