// strata/communicator/detail/call_agreement.hpp — whether every rank makes the same collective
// call, checked through another group: what a communicator whose transport cannot tell (NCCL,
// nccl#1417) uses to raise MismatchError instead of hanging or reinterpreting bytes.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/core/collective.hpp>
#include <strata/core/error.hpp>

namespace strata::communicator::detail {

/// What ranks compare before a collective: kind, element type, count, op (-1 when the kind
/// does not reduce), root (-1 without one) and the call's number on the group.
using CallDescriptor = std::array<std::int64_t, 6>;

inline CallDescriptor describe_for_agreement(const CollectiveCall& call,
                                             std::uint64_t sequence) noexcept {
  return {static_cast<std::int64_t>(call.kind),
          static_cast<std::int64_t>(call.type),
          static_cast<std::int64_t>(call.count),
          reduces(call.kind) ? static_cast<std::int64_t>(call.op) : -1,
          has_root(call.kind) ? call.root : -1,
          static_cast<std::int64_t>(sequence)};
}

/// Gathers every rank's descriptor of call number `sequence` with `all_gather(mine, all)` (the
/// side group's, with its deadline) and raises MismatchError, naming both calls, when any rank
/// differs from this one. Every rank sees the same table, so all raise or none does.
template <class AllGather>
void check_call_agreement(int rank, int size, const CollectiveCall& call, std::uint64_t sequence,
                          AllGather&& all_gather) {
  const CallDescriptor mine = describe_for_agreement(call, sequence);
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(size));
  all_gather(std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
  for (int peer = 0; peer < size; ++peer) {
    CallDescriptor theirs{};
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(peer * mine.size()), mine.size(),
                theirs.begin());
    if (theirs == mine) continue;
    CollectiveCall other;
    other.kind = static_cast<Collective>(theirs[0]);
    other.type = static_cast<DataType>(theirs[1]);
    other.count = static_cast<std::size_t>(theirs[2]);
    other.op = static_cast<ReduceOp>(theirs[3] < 0 ? 0 : theirs[3]);
    other.root = static_cast<int>(theirs[4]);
    throw MismatchError(rank, to_string(call.kind),
                        fmt::format("ranks disagree on collective #{}: rank {} called {} but rank "
                                    "{} called {}",
                                    sequence, rank, describe(call), peer, describe(other)));
  }
}

}  // namespace strata::communicator::detail
