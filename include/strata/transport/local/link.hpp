// strata/transport/local/link.hpp — one rank's SharedMemoryLink (algorithms/link.hpp) for one call.
#pragma once

#include <cstdint>
#include <exception>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/local/group.hpp>

namespace strata::transport::local {

/// The SharedMemoryLink of one rank for one round of a `Group`.
class Link {
 public:
  Link(Group& group, std::uint64_t round, int rank, const Deadline& deadline,
       std::string_view operation) noexcept
      : group_(&group), round_(round), rank_(rank), deadline_(deadline), operation_(operation) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return group_->size(); }
  const CollectiveCall& peer_call(int peer) const noexcept { return group_->call(round_, peer); }
  void sync() { group_->arrive_and_wait(rank_, deadline_, operation_); }
  /// The first synchronization point of a collective that moves data: once released, every
  /// rank may work on every other rank's buffers until `Group::end_transfer`.
  void open_transfer() { group_->arrive_and_wait(rank_, deadline_, operation_, true); }
  /// Fails the group (every rank's pending and later calls raise `error`'s root cause).
  void fail(const std::exception_ptr& error) noexcept { group_->fail(error); }

 private:
  Group* group_;
  std::uint64_t round_;
  int rank_;
  Deadline deadline_;
  std::string_view operation_;
};

/// Raises MismatchError, and fails the group, unless every rank posted the same collective
/// (after `open_transfer`). Every rank runs the same comparison on the same posted calls, so
/// either all ranks raise the mismatch or none does.
inline void check_agreement(Link& link) {
  const CollectiveCall& first = link.peer_call(0);
  for (int r = 1; r < link.size(); ++r) {
    const CollectiveCall& other = link.peer_call(r);
    if (agrees(first, other)) continue;
    MismatchError error(link.rank(), to_string(link.peer_call(link.rank()).kind),
                        fmt::format("ranks disagree: rank 0 called {} but rank {} called {}",
                                    describe(first), r, describe(other)));
    link.fail(std::make_exception_ptr(error));
    throw error;
  }
}

}  // namespace strata::transport::local
