// strata/transport/tcp/sub_link.hpp — a MessageLink over some of a group's ranks.
//
// A group that spans hosts runs its collectives in stages (communicator/impl/tcp.ipp): the
// ranks of each host through shared memory, then one rank per host over TCP. That middle stage
// is an ordinary algorithm on a smaller group: this link numbers the chosen ranks 0..m-1 for
// the algorithm and maps its plans back onto the mesh.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <strata/transport/plan.hpp>
#include <strata/transport/tcp/link.hpp>

namespace strata::transport::tcp {

/// The MessageLink (algorithms/link.hpp) of `members[index]`, which must be this rank, among
/// `members` (ranks of the group, in the order the algorithm numbers them).
class SubLink {
 public:
  SubLink(Link& link, std::span<const int> members, int index) noexcept
      : link_(link), members_(members), index_(index) {}

  int rank() const noexcept { return index_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::size_t chunk_bytes() const noexcept { return link_.chunk_bytes(); }
  int channels_per_peer() const noexcept { return link_.channels_per_peer(); }
  std::byte* scratch(std::size_t bytes) { return link_.scratch(bytes); }

  template <class OnReceived>
  void transfer(std::span<const SendStep> sends, std::span<const RecvStep> recvs,
                OnReceived&& on_received) {
    std::vector<SendStep> mapped_sends(sends.begin(), sends.end());
    std::vector<RecvStep> mapped_recvs(recvs.begin(), recvs.end());
    for (auto& step : mapped_sends)
      step.peer = members_[static_cast<std::size_t>(step.peer)];
    for (auto& step : mapped_recvs)
      step.peer = members_[static_cast<std::size_t>(step.peer)];
    link_.transfer(std::span<const SendStep>(mapped_sends), std::span<const RecvStep>(mapped_recvs),
                   on_received);
  }

 private:
  Link& link_;
  std::span<const int> members_;
  int index_;
};

}  // namespace strata::transport::tcp
