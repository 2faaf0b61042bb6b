// strata/algorithms/link.hpp — what an algorithm sees of its peers: the two link concepts.
//
// Algorithms are written against these, never against sockets or threads: a transport models
// one of them (transport/local for threads of one process, transport/tcp for processes), and
// a communicator hands an algorithm its link and its call, `Algorithm::run(link, call)`.
#pragma once

#include <concepts>
#include <cstddef>
#include <span>

#include <strata/core/collective.hpp>
#include <strata/transport/plan.hpp>

namespace strata::algorithms {

/// L models SharedMemoryLink if:
///   1. `link.rank()` and `link.size()` give this rank and the group size (as int), so an
///      algorithm can compute which part of the work is its own;
///   2. `link.peer_call(r)` gives rank r's `CollectiveCall` for the current collective, whose
///      `send`/`recv` buffers this rank may read (and, where the algorithm says so, write)
///      between synchronization points: the ranks share one address space;
///   3. `link.sync()` returns once every rank has reached the same point, or throws a
///      `strata::Error` (deadline, failed peer): what one rank wrote before `sync()` is visible
///      to every rank after it.
/// It leaves out any byte transport: algorithms between address spaces use a MessageLink.
template <class L>
concept SharedMemoryLink = requires(L& link, const L& const_link, int peer) {
  { const_link.rank() } -> std::same_as<int>;
  { const_link.size() } -> std::same_as<int>;
  { const_link.peer_call(peer) } -> std::same_as<const CollectiveCall&>;
  link.sync();
};

/// L models MessageLink if it runs plans of messages between the ranks of a group:
///   1. `rank()` and `size()`: algorithms cut the work by them;
///   2. `transfer(sends, recvs, handler)` runs a plan (transport/plan.hpp), calling
///      `handler(j)` when receive j is in: where reductions happen;
///   3. `chunk_bytes()` bounds one message (pipelined algorithms cut buffers into segments of
///      at most that), `channels_per_peer()` says how many messages from one peer may be in
///      flight (receive slots are reused modulo it), and `scratch(bytes)` lends memory for
///      received segments and partial results.
/// It leaves out the call (the algorithm is handed it), sockets, framing and failure
/// handling: those are the transport's.
template <class L>
concept MessageLink = requires(L& link, const L& clink, std::span<const transport::SendStep> sends,
                               std::span<const transport::RecvStep> recvs, std::size_t bytes) {
  { clink.rank() } -> std::same_as<int>;
  { clink.size() } -> std::same_as<int>;
  { clink.chunk_bytes() } -> std::convertible_to<std::size_t>;
  { clink.channels_per_peer() } -> std::same_as<int>;
  { link.scratch(bytes) } -> std::same_as<std::byte*>;
  link.transfer(sends, recvs, [](std::size_t) {});
};

}  // namespace strata::algorithms
