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
#include <span>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

namespace detail {

/// The plan of a rank that takes part in the power-of-two exchange, built phase by phase: each
/// receive round lands in its own scratch region, and the first combine reads this rank's input
/// where it lies (so out of place nothing copies the input first), later ones read `out`.
class RecursiveDoublingPlan {
 public:
  RecursiveDoublingPlan(const CollectiveCall& call, const Participant& self,
                        const PowerOfTwoFold& fold, std::size_t segments, std::byte* scratch)
      : call_(call),
        self_(self),
        fold_(fold),
        all_{0, call.count},
        segments_(segments),
        scratch_(scratch),
        mine_(self.in) {}

  /// Phase 1 of an odd rank r < 2e: receive r-1's vector and combine it with this rank's.
  void fold_in() {
    if (fold_.folds_in)
      receive_round(self_.rank - 1, /*received_first=*/true, fold_.rounds == 0, {});
  }

  /// Phase 2: in round k, exchange the whole vector with the rank across bit k and combine.
  void exchange_rounds() {
    for (int mask = 1; mask < fold_.p; mask <<= 1) {
      const int partner_virtual = fold_.virtual_rank ^ mask;
      const int partner = fold_.real_rank(partner_virtual);
      std::vector<std::ptrdiff_t> my_sends(segments_);
      for (std::size_t k = 0; k < segments_; ++k) {
        my_sends[k] = static_cast<std::ptrdiff_t>(sends_.size());
        send_segment(partner, mine_, k);
      }
      receive_round(partner, partner_virtual < fold_.virtual_rank, mask * 2 >= fold_.p, my_sends);
    }
  }

  /// Phase 3 of an odd rank r < 2e: send the result to r-1.
  void unfold() {
    if (!fold_.folds_in) return;
    for (std::size_t k = 0; k < segments_; ++k)
      send_segment(self_.rank - 1, self_.out, k);
  }

  std::span<const transport::SendStep> sends() const noexcept { return sends_; }
  std::span<const transport::RecvStep> recvs() const noexcept { return recvs_; }

  /// The handler of receive j: combine the received segment with this rank's vector into `out`.
  void on_received(std::size_t j) const {
    const Combine& c = combines_[j];
    combine_partials(call_, self_.out + c.part.begin * self_.element,
                     c.mine + c.part.begin * self_.element, recvs_[j].data, c.received_first,
                     c.part.size(), c.last, self_.size);
  }

 private:
  struct Combine {
    Range part;
    bool received_first;  // the received vector belongs to the lower virtual rank
    bool last;            // the last combine of this rank: finish a mean here
    // This rank's side: its input for the first combine, which writes `out`, then `out`.
    const std::byte* mine;
  };

  Range segment(std::size_t k) const noexcept { return part_of(all_, segments_, k); }

  /// The receive segment k of a send waits for: segment k of the previous receive round.
  std::ptrdiff_t previous_recv(std::size_t k) const noexcept {
    return recvs_.size() < segments_ ? -1
                                     : static_cast<std::ptrdiff_t>(recvs_.size() - segments_ + k);
  }

  void send_segment(int peer, const std::byte* base, std::size_t k) {
    const Range part = segment(k);
    sends_.push_back(
        {peer, base + part.begin * self_.element, part.size() * self_.element, previous_recv(k)});
  }

  /// Receives a whole vector from `from` into the next scratch region; `after_send[k]` is the
  /// send of this round that reads segment k of `out` (empty: none).
  void receive_round(int from, bool received_first, bool last,
                     std::span<const std::ptrdiff_t> after_send) {
    const std::size_t bytes = call_.count * self_.element;
    std::byte* region = scratch_ + static_cast<std::size_t>(round_++) * bytes;
    for (std::size_t k = 0; k < segments_; ++k) {
      const Range part = segment(k);
      // The combine overwrites `out`: it waits for a send of this round that reads `out`.
      const std::ptrdiff_t wait = mine_ == self_.out && !after_send.empty() ? after_send[k] : -1;
      recvs_.push_back(
          {from, region + part.begin * self_.element, part.size() * self_.element, wait});
      combines_.push_back({part, received_first, last, mine_});
    }
    mine_ = self_.out;
  }

  const CollectiveCall& call_;
  const Participant& self_;
  const PowerOfTwoFold& fold_;
  Range all_;
  std::size_t segments_;
  std::byte* scratch_;
  int round_ = 0;          // receive rounds so far: the next one's scratch region
  const std::byte* mine_;  // this rank's vector: its input until the first combine, then `out`
  std::vector<transport::SendStep> sends_;
  std::vector<transport::RecvStep> recvs_;
  std::vector<Combine> combines_;
};

}  // namespace detail

struct AllReduceRecursiveDoubling {
  static constexpr std::string_view kName = "recursive_doubling";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& call) {
    const detail::Participant self(link, call);
    const std::size_t bytes = call.count * self.element;
    if (self.alone(bytes)) return;
    const detail::PowerOfTwoFold fold(self);
    const std::size_t segments = detail::segments_for(call.count, self.element, link.chunk_bytes());
    // Receive round i has its own scratch region: rounds from different peers may arrive
    // before the previous round is combined.
    const int receive_rounds = fold.folded_away ? 0 : fold.rounds + (fold.folds_in ? 1 : 0);
    std::byte* scratch = link.scratch(static_cast<std::size_t>(receive_rounds) * bytes);
    if (fold.folded_away) {  // phases 1 and 3 of an even rank: hand the vector over, get the result
      std::vector<detail::Range> parts(segments);
      for (std::size_t k = 0; k < segments; ++k)
        parts[k] = detail::part_of({0, call.count}, segments, k);
      detail::fold_away(link, self.rank + 1, self.in, self.out, parts, self.element);
      return;
    }
    detail::RecursiveDoublingPlan plan(call, self, fold, segments, scratch);
    // Phase 1, odd rank r < 2e: combine r-1's vector into this rank's.
    plan.fold_in();
    // Phase 2: log2(p) rounds, each exchanging the whole vector with the rank across bit k.
    plan.exchange_rounds();
    // Phase 3, odd rank r < 2e: send the result to r-1.
    plan.unfold();
    link.transfer(plan.sends(), plan.recvs(), [&](std::size_t j) { plan.on_received(j); });
  }
};

}  // namespace strata::algorithms
