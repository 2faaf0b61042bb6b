// strata/algorithms/barrier_dissemination.hpp — the dissemination barrier over messages.
//
// Computes  no rank returns before every rank has entered the barrier.
// Phases    ⌈log2 n⌉ rounds: in round k rank r sends an empty message to r+2^k and waits for
//           one from r-2^k; a round starts when the previous one has been received. After
//           the last round every rank has heard, directly or transitively, from all others.
// Cost      ⌈log2 n⌉ message latencies, header-only messages; correct for any n.
// Requires  agreed calls (every rank in the same barrier).
// Determinism  no data.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <strata/algorithms/detail/messages.hpp>

namespace strata::algorithms {

struct BarrierDissemination {
  static constexpr std::string_view kName = "dissemination";

  template <MessageLink Link>
  static void run(Link& link, const CollectiveCall& /*call*/) {
    const int n = link.size();
    const int r = link.rank();
    std::vector<transport::SendStep> sends;
    std::vector<transport::RecvStep> recvs;
    for (int distance = 1; distance < n; distance *= 2) {
      const auto round = static_cast<std::ptrdiff_t>(recvs.size());
      sends.push_back({detail::mod(r + distance, n), nullptr, 0, round == 0 ? -1 : round - 1});
      recvs.push_back({detail::mod(r - distance, n), nullptr, 0, -1});
    }
    link.transfer(sends, recvs, [](std::size_t) {});
  }
};

}  // namespace strata::algorithms
