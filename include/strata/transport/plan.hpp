// strata/transport/plan.hpp — a collective as a plan of messages, for message-passing links.
//
// Algorithms over a network (TCP now, NCCL's point-to-point later) describe one rank's part of
// a collective as sends and receives; the transport's `Link::transfer(sends, recvs, handler)`
// runs them all at once. Dependencies make pipelining explicit: a send that forwards received
// data waits for that receive, and a receive whose handler overwrites memory a send still reads
// waits for that send. Messages to and from one peer keep their order.
#pragma once

#include <cstddef>

namespace strata::transport {

/// One message this rank sends: `bytes` from `data` to `peer`, once receive `after_recv` of the
/// same plan has been handled (-1: at once). `bytes` may be 0: the message still carries the
/// call's description, so disagreeing ranks are caught even when there is no data.
struct SendStep {
  int peer = 0;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::ptrdiff_t after_recv = -1;
};

/// One message this rank receives: `bytes` from `peer` into `data`. Its handler runs once the
/// data is in, send `after_send` of the same plan has completed and the handler of the earlier
/// receive `after_recv` has run (-1: at once); the latter orders handlers that combine into the
/// same memory receives from different peers.
struct RecvStep {
  int peer = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::ptrdiff_t after_send = -1;
  std::ptrdiff_t after_recv = -1;
};

}  // namespace strata::transport
