// strata/transport/local/link.hpp — what an in-process algorithm sees of its peers.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include <strata/communicator/collective.hpp>
#include <strata/core/deadline.hpp>
#include <strata/transport/local/rendezvous.hpp>

namespace strata::transport::local {

/// L models SharedMemoryLink if:
///   1. `link.rank()` and `link.size()` give this rank and the group size (as int), so an
///      algorithm can compute which part of the work is its own;
///   2. `link.call(r)` gives rank r's `CollectiveCall` for the current collective, whose
///      `send`/`recv` pointers this rank may read (and, where the algorithm says so, write)
///      between synchronization points: replicas share one address space;
///   3. `link.sync()` returns once every rank has reached the same point, or throws a
///      `strata::Error` (deadline, failed peer): what one rank wrote before `sync()` is visible
///      to every rank after it.
/// It leaves out any byte transport: algorithms over sockets use a message link instead.
template <class L>
concept SharedMemoryLink = requires(L& link, const L& const_link, int peer) {
  { const_link.rank() } -> std::same_as<int>;
  { const_link.size() } -> std::same_as<int>;
  { const_link.call(peer) } -> std::same_as<const communicator::CollectiveCall&>;
  link.sync();
};

/// The SharedMemoryLink of one rank for one round of a `Rendezvous`.
class Link {
 public:
  Link(Rendezvous& rendezvous, std::uint64_t round, int rank, const Deadline& deadline,
       std::string_view operation) noexcept
      : rendezvous_(&rendezvous),
        round_(round),
        rank_(rank),
        deadline_(deadline),
        operation_(operation) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return rendezvous_->size(); }
  const communicator::CollectiveCall& call(int peer) const noexcept {
    return rendezvous_->call(round_, peer);
  }
  void sync() { rendezvous_->arrive_and_wait(rank_, deadline_, operation_); }
  /// The first synchronization point of a collective that moves data: once released, every
  /// rank may work on every other rank's buffers until `Rendezvous::end_transfer`.
  void open_transfer() { rendezvous_->arrive_and_wait(rank_, deadline_, operation_, true); }

 private:
  Rendezvous* rendezvous_;
  std::uint64_t round_;
  int rank_;
  Deadline deadline_;
  std::string_view operation_;
};

static_assert(SharedMemoryLink<Link>);

}  // namespace strata::transport::local
