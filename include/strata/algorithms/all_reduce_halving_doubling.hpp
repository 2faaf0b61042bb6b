// strata/algorithms/all_reduce_halving_doubling.hpp — Rabenseifner's all-reduce: a reduce-scatter
// by recursive halving, then an all-gather by recursive doubling, for any group size.
//
// Computes  every rank's output = op over all ranks' inputs.
// Phases    Let p be the largest power of two ≤ n and e = n - p. The vector is cut into p
//           blocks, each into pieces of at most chunk_bytes.
//           1. fold: for r < 2e, even rank r sends its vector to r+1, which combines them;
//              even ranks then wait. The p remaining ranks get virtual ranks 0..p-1.
//           2. reduce-scatter, log2(p) rounds: in round k (distance d = p/2^(k+1)) each rank
//              keeps the half of its blocks on its side of bit d of its virtual rank, sends
//              the other half to the rank across that bit, and combines what comes back.
//              Virtual rank v ends with block v reduced over all ranks.
//           3. all-gather, log2(p) rounds in reverse: each rank sends the blocks it has to
//              the rank across bit d and receives as many, straight into its output.
//           4. unfold: odd ranks r < 2e send the result to r-1.
//           Every piece travels as its own message, so a piece goes on to the next round as
//           soon as it is combined: rounds overlap.
// Cost      2·log2(p) (+2 when n is not a power of two) message latencies; 2·(p-1)/p·S bytes
//           sent per rank, like the ring, and (p-1)/p·S combined. Between recursive doubling
//           (log2 p hops, S·log2 p bytes) and the ring (2(n-1) hops): medium messages.
// Requires  agreed calls; scratch of 2·S bytes at most.
// Determinism  bit-identical on every rank: each block is combined by one rank per round
//           (lower virtual rank's partial, higher's) and then copied.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct AllReduceHalvingDoubling {
  static constexpr std::string_view kName = "halving_doubling";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    if (self.alone(call.count * self.element)) return;

    int p = 1;
    int rounds = 0;
    while (p * 2 <= self.size) {
      p *= 2;
      ++rounds;
    }
    const int extra = self.size - p;
    const auto blocks = static_cast<std::size_t>(p);
    const detail::Range all{0, call.count};
    auto block = [&](std::size_t b) { return detail::part_of(all, blocks, b); };
    const std::size_t pieces_per_block =
        detail::segments_for((call.count + blocks - 1) / blocks, self.element, link.chunk_bytes());
    // Piece x is part x % pieces_per_block of block x / pieces_per_block.
    const std::size_t pieces = blocks * pieces_per_block;
    auto piece = [&](std::size_t x) {
      return detail::part_of(block(x / pieces_per_block), pieces_per_block, x % pieces_per_block);
    };
    // Blocks [first, last) as an element range.
    auto span_of = [&](std::size_t first, std::size_t last) {
      return detail::Range{block(first).begin, block(last - 1).end};
    };

    const bool folded_away = self.rank < 2 * extra && self.rank % 2 == 0;
    const bool folds_in = self.rank < 2 * extra && self.rank % 2 == 1;
    if (folded_away) {  // phases 1 and 4 of an even rank: hand the vector over, get the result
      std::vector<detail::Range> parts(pieces);
      for (std::size_t x = 0; x < pieces; ++x)
        parts[x] = piece(x);
      detail::fold_away(link, self.rank + 1, self.in, self.out, parts, self.element);
      return;
    }
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    auto send_piece = [&](int peer, const std::byte* base, std::size_t x, std::ptrdiff_t after) {
      const detail::Range part = piece(x);
      sends.push_back({peer, base + part.begin * self.element, part.size() * self.element, after});
    };
    const int virtual_rank = folds_in ? self.rank / 2 : self.rank - extra;
    auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };

    // What the handler of receive j does: combine the received piece with this rank's partial
    // (`own`, its input or `out`) into `out`, or nothing (the all-gather receives in place).
    struct Combine {
      detail::Range part;
      const std::byte* own = nullptr;  // nullptr: nothing to combine
      bool received_first = false;     // the received partial belongs to the lower rank
      bool last = false;               // the final combine of this piece: finish a mean here
    };
    std::vector<Combine> combines;
    // Per piece: the receive after whose handler `out` holds this rank's partial or result
    // (-1: nothing received yet, the partial is the input), and the send that read it from
    // `out` (a later receive into `out` waits for that send).
    std::vector<std::ptrdiff_t> latest(pieces, -1);
    std::vector<std::ptrdiff_t> read_from_out(pieces, -1);
    auto partial = [&](std::size_t x) -> const std::byte* {
      return latest[x] < 0 ? self.in : self.out;
    };

    // Scratch: the folded vector, then each reduce-scatter round's half, one after another
    // (a round's pieces may arrive before the previous round's are combined).
    std::size_t scratch_bytes = folds_in ? call.count * self.element : 0;
    for (std::size_t kept = blocks / 2; kept >= 1; kept /= 2)  // any `kept` blocks: ≤ 1 more
      scratch_bytes += (span_of(0, kept).size() + 1) * self.element;
    std::byte* region = link.scratch(scratch_bytes);

    auto receive_combining = [&](int peer, std::size_t x, std::byte* base, detail::Range around,
                                 bool received_first, bool final_round) {
      const detail::Range part = piece(x);
      recvs.push_back({peer, base + (part.begin - around.begin) * self.element,
                       part.size() * self.element, -1, latest[x]});
      combines.push_back({part, partial(x), received_first, final_round});
      latest[x] = static_cast<std::ptrdiff_t>(recvs.size() - 1);
    };

    if (folds_in) {
      for (std::size_t x = 0; x < pieces; ++x)
        receive_combining(self.rank - 1, x, region, all, /*received_first=*/true,
                          /*final_round=*/false);
      region += call.count * self.element;
    }
    std::size_t first = 0;
    std::size_t last = blocks;
    for (int k = 0; k < rounds; ++k) {
      const auto distance = blocks >> (k + 1);
      const int partner_virtual = virtual_rank ^ static_cast<int>(distance);
      const int partner = real_rank(partner_virtual);
      const std::size_t middle = first + distance;
      const bool upper = (static_cast<std::size_t>(virtual_rank) & distance) != 0;
      const std::size_t give_first = upper ? first : middle;
      const std::size_t keep_first = upper ? middle : first;
      for (std::size_t x = give_first * pieces_per_block;
           x < (give_first + distance) * pieces_per_block; ++x) {
        if (latest[x] >= 0 || self.in == self.out)
          read_from_out[x] = static_cast<std::ptrdiff_t>(sends.size());
        send_piece(partner, partial(x), x, latest[x]);
      }
      const detail::Range kept = span_of(keep_first, keep_first + distance);
      for (std::size_t x = keep_first * pieces_per_block;
           x < (keep_first + distance) * pieces_per_block; ++x)
        receive_combining(partner, x, region, kept, partner_virtual < virtual_rank,
                          k + 1 == rounds);
      region += kept.size() * self.element;
      first = keep_first;
      last = keep_first + distance;
    }
    for (int k = rounds - 1; k >= 0; --k) {
      const auto distance = blocks >> (k + 1);
      const int partner = real_rank(virtual_rank ^ static_cast<int>(distance));
      const bool upper = (static_cast<std::size_t>(virtual_rank) & distance) != 0;
      const std::size_t partner_first = upper ? first - distance : last;
      for (std::size_t x = first * pieces_per_block; x < last * pieces_per_block; ++x)
        send_piece(partner, self.out, x, latest[x]);
      for (std::size_t x = partner_first * pieces_per_block;
           x < (partner_first + distance) * pieces_per_block; ++x) {
        const detail::Range part = piece(x);
        recvs.push_back({partner, self.out + part.begin * self.element, part.size() * self.element,
                         read_from_out[x], -1});
        combines.push_back({part});
        latest[x] = static_cast<std::ptrdiff_t>(recvs.size() - 1);
      }
      first = upper ? partner_first : first;
      last = first + 2 * distance;
    }
    if (folds_in)
      for (std::size_t x = 0; x < pieces; ++x)
        send_piece(self.rank - 1, self.out, x, latest[x]);

    link.transfer(sends, recvs, [&](std::size_t j) {
      const Combine& c = combines[j];
      if (c.own == nullptr) return;
      detail::combine_partials(call.type, self.out + c.part.begin * self.element,
                               c.own + c.part.begin * self.element, recvs[j].data, c.received_first,
                               c.part.size(), call.op, c.last, self.size);
    });
  }
};

}  // namespace strata::algorithms
