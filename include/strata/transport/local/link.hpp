// strata/transport/local/link.hpp — one rank's SharedMemoryLink (algorithms/link.hpp) for one call.
#pragma once

#include <cstdint>
#include <string_view>

#include <strata/core/collective.hpp>
#include <strata/core/deadline.hpp>
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

 private:
  Group* group_;
  std::uint64_t round_;
  int rank_;
  Deadline deadline_;
  std::string_view operation_;
};

}  // namespace strata::transport::local
