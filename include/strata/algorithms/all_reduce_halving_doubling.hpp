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
#include <span>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

namespace detail {

/// The vector cut for halving-doubling: `blocks` blocks (one per virtual rank), each cut into
/// `per_block` pieces of at most chunk_bytes. Piece x is part x % per_block of block
/// x / per_block, so the pieces of blocks [first, last) are [first·per_block, last·per_block).
class BlockPieces {
 public:
  BlockPieces(std::size_t count, std::size_t blocks, std::size_t element,
              std::size_t chunk_bytes) noexcept
      : all_{0, count},
        blocks_(blocks),
        per_block_(segments_for((count + blocks - 1) / blocks, element, chunk_bytes)) {}

  Range all() const noexcept { return all_; }
  std::size_t blocks() const noexcept { return blocks_; }
  /// How many pieces there are in all.
  std::size_t size() const noexcept { return blocks_ * per_block_; }
  /// The first piece of block b (b == blocks(): one past the last piece).
  std::size_t first_of(std::size_t b) const noexcept { return b * per_block_; }
  Range block(std::size_t b) const noexcept { return part_of(all_, blocks_, b); }
  Range piece(std::size_t x) const noexcept {
    return part_of(block(x / per_block_), per_block_, x % per_block_);
  }
  /// Blocks [first, last) as an element range.
  Range blocks_span(std::size_t first, std::size_t last) const noexcept {
    return Range{block(first).begin, block(last - 1).end};
  }
  std::vector<Range> list() const {
    std::vector<Range> parts(size());
    for (std::size_t x = 0; x < size(); ++x)
      parts[x] = piece(x);
    return parts;
  }

 private:
  Range all_;
  std::size_t blocks_;
  std::size_t per_block_;
};

/// The plan of a rank that takes part in the power-of-two exchange, built phase by phase. It
/// tracks, per piece, which receive last wrote this rank's partial into `out` and which send
/// read it from there, so that every message waits for exactly what it depends on.
class HalvingDoublingPlan {
 public:
  template <MessageLink Link>
  HalvingDoublingPlan(Link& link, const CollectiveCall& call, const Participant& self,
                      const PowerOfTwoFold& fold, const BlockPieces& pieces)
      : call_(call),
        self_(self),
        fold_(fold),
        pieces_(pieces),
        latest_(pieces.size(), -1),
        read_from_out_(pieces.size(), -1),
        first_(0),
        last_(pieces.blocks()) {
    region_ = link.scratch(scratch_bytes());
  }

  /// Phase 1 of an odd rank r < 2e: receive r-1's vector and combine it with this rank's.
  void fold_in() {
    if (!fold_.folds_in) return;
    for (std::size_t x = 0; x < pieces_.size(); ++x)
      receive_combining(self_.rank - 1, x, pieces_.all(), /*received_first=*/true,
                        /*final_round=*/false);
    region_ += call_.count * self_.element;
  }

  void reduce_scatter() {
    for (int k = 0; k < fold_.rounds; ++k)
      reduce_scatter_round(k);
  }

  void all_gather() {
    for (int k = fold_.rounds - 1; k >= 0; --k)
      all_gather_round(k);
  }

  /// Phase 4 of an odd rank r < 2e: send the result to r-1.
  void unfold() {
    if (!fold_.folds_in) return;
    for (std::size_t x = 0; x < pieces_.size(); ++x)
      send_piece(self_.rank - 1, self_.out, x, latest_[x]);
  }

  std::span<const transport::SendStep> sends() const noexcept { return sends_; }
  std::span<const transport::RecvStep> recvs() const noexcept { return recvs_; }

  /// The handler of receive j: combine the received piece with this rank's partial, or
  /// nothing (the all-gather receives in place).
  void on_received(std::size_t j) const {
    const Combine& c = combines_[j];
    if (c.own == nullptr) return;
    combine_partials(call_, self_.out + c.part.begin * self_.element,
                     c.own + c.part.begin * self_.element, recvs_[j].data, c.received_first,
                     c.part.size(), c.last, self_.size);
  }

 private:
  // What the handler of receive j does: combine the received piece with this rank's partial
  // (`own`, its input or `out`) into `out`, or nothing.
  struct Combine {
    Range part;
    const std::byte* own = nullptr;  // nullptr: nothing to combine
    bool received_first = false;     // the received partial belongs to the lower rank
    bool last = false;               // the final combine of this piece: finish a mean here
  };

  /// Scratch: the folded vector, then each reduce-scatter round's half, one after another
  /// (a round's pieces may arrive before the previous round's are combined).
  std::size_t scratch_bytes() const noexcept {
    std::size_t bytes = fold_.folds_in ? call_.count * self_.element : 0;
    for (std::size_t kept = pieces_.blocks() / 2; kept >= 1; kept /= 2)  // any `kept`: ≤ 1 more
      bytes += (pieces_.blocks_span(0, kept).size() + 1) * self_.element;
    return bytes;
  }

  /// Where piece x's partial is: the input until something was received for it, then `out`.
  const std::byte* partial(std::size_t x) const noexcept {
    return latest_[x] < 0 ? self_.in : self_.out;
  }

  void send_piece(int peer, const std::byte* base, std::size_t x, std::ptrdiff_t after) {
    const Range part = pieces_.piece(x);
    sends_.push_back({peer, base + part.begin * self_.element, part.size() * self_.element, after});
  }

  /// Receives piece x into the current scratch region (which holds the elements `around`) and
  /// combines it, once the previous combine of that piece is done.
  void receive_combining(int peer, std::size_t x, Range around, bool received_first,
                         bool final_round) {
    const Range part = pieces_.piece(x);
    recvs_.push_back({peer, region_ + (part.begin - around.begin) * self_.element,
                      part.size() * self_.element, -1, latest_[x]});
    combines_.push_back({part, partial(x), received_first, final_round});
    latest_[x] = static_cast<std::ptrdiff_t>(recvs_.size() - 1);
  }

  /// Round k of phase 2: give the half of blocks [first, last) on the partner's side of bit
  /// `distance`, keep and combine the other half.
  void reduce_scatter_round(int k) {
    const auto distance = pieces_.blocks() >> (k + 1);
    const int partner_virtual = fold_.virtual_rank ^ static_cast<int>(distance);
    const int partner = fold_.real_rank(partner_virtual);
    const bool upper = (static_cast<std::size_t>(fold_.virtual_rank) & distance) != 0;
    const std::size_t give_first = upper ? first_ : first_ + distance;
    const std::size_t keep_first = upper ? first_ + distance : first_;
    for (std::size_t x = pieces_.first_of(give_first); x < pieces_.first_of(give_first + distance);
         ++x) {
      if (latest_[x] >= 0 || self_.in == self_.out)
        read_from_out_[x] = static_cast<std::ptrdiff_t>(sends_.size());
      send_piece(partner, partial(x), x, latest_[x]);
    }
    const Range kept = pieces_.blocks_span(keep_first, keep_first + distance);
    for (std::size_t x = pieces_.first_of(keep_first); x < pieces_.first_of(keep_first + distance);
         ++x)
      receive_combining(partner, x, kept, partner_virtual < fold_.virtual_rank,
                        k + 1 == fold_.rounds);
    region_ += kept.size() * self_.element;
    first_ = keep_first;
    last_ = keep_first + distance;
  }

  /// Round k of phase 3: send the blocks [first, last) this rank has to the rank across bit
  /// `distance` and receive its as many, straight into `out`, once `out` was read there.
  void all_gather_round(int k) {
    const auto distance = pieces_.blocks() >> (k + 1);
    const int partner = fold_.real_rank(fold_.virtual_rank ^ static_cast<int>(distance));
    const bool upper = (static_cast<std::size_t>(fold_.virtual_rank) & distance) != 0;
    const std::size_t partner_first = upper ? first_ - distance : last_;
    for (std::size_t x = pieces_.first_of(first_); x < pieces_.first_of(last_); ++x)
      send_piece(partner, self_.out, x, latest_[x]);
    for (std::size_t x = pieces_.first_of(partner_first);
         x < pieces_.first_of(partner_first + distance); ++x) {
      const Range part = pieces_.piece(x);
      recvs_.push_back({partner, self_.out + part.begin * self_.element,
                        part.size() * self_.element, read_from_out_[x], -1});
      combines_.push_back({part});
      latest_[x] = static_cast<std::ptrdiff_t>(recvs_.size() - 1);
    }
    first_ = upper ? partner_first : first_;
    last_ = first_ + 2 * distance;
  }

  const CollectiveCall& call_;
  const Participant& self_;
  const PowerOfTwoFold& fold_;
  const BlockPieces& pieces_;
  std::vector<transport::SendStep> sends_;
  std::vector<transport::RecvStep> recvs_;
  std::vector<Combine> combines_;
  // Per piece: the receive after whose handler `out` holds this rank's partial or result
  // (-1: nothing received yet, the partial is the input), and the send that read it from
  // `out` (a later receive into `out` waits for that send).
  std::vector<std::ptrdiff_t> latest_;
  std::vector<std::ptrdiff_t> read_from_out_;
  std::byte* region_ = nullptr;  // the scratch where the next round's receives go
  std::size_t first_;            // this rank's blocks are [first_, last_)
  std::size_t last_;
};

}  // namespace detail

struct AllReduceHalvingDoubling {
  static constexpr std::string_view kName = "halving_doubling";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    if (self.alone(call.count * self.element)) return;
    const detail::PowerOfTwoFold fold(self);
    const detail::BlockPieces pieces(call.count, static_cast<std::size_t>(fold.p), self.element,
                                     link.chunk_bytes());
    if (fold.folded_away) {  // phases 1 and 4 of an even rank: hand the vector over, get the result
      const std::vector<detail::Range> parts = pieces.list();
      detail::fold_away(link, self.rank + 1, self.in, self.out, parts, self.element);
      return;
    }
    detail::HalvingDoublingPlan plan(link, call, self, fold, pieces);
    // Phase 1, odd rank r < 2e: combine r-1's vector into this rank's.
    plan.fold_in();
    // Phase 2: log2(p) rounds of recursive halving; virtual rank v ends with block v reduced.
    plan.reduce_scatter();
    // Phase 3: log2(p) rounds of recursive doubling, in reverse, into `out`.
    plan.all_gather();
    // Phase 4, odd rank r < 2e: send the result to r-1.
    plan.unfold();
    link.transfer(plan.sends(), plan.recvs(), [&](std::size_t j) { plan.on_received(j); });
  }
};

}  // namespace strata::algorithms
