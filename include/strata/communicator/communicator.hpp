// strata/communicator/communicator.hpp — the Communicator concept.
//
// A communicator is one rank's endpoint in a group of `size()` ranks that run the same
// sequence of collectives. Models: `LocalCommunicator` (threads of one process),
// `SelfCommunicator` (a group of one); TCP and NCCL communicators follow the same concept.
//
// Semantics every model keeps (the conformance tests check them):
//   - Every rank calls the same collectives in the same order with the same count, element
//     type, op and root; a rank that differs gets `MismatchError`, and so does every other
//     rank of the group. Nothing is reduced from disagreeing calls.
//   - Every call has a deadline (`CommunicatorOptions::timeout`, or `CallOptions::timeout`
//     per call); past it the call throws `TimeoutError` naming the ranks it waited for.
//   - After any error the communicator is failed: every later call, on every rank, throws.
//     Re-create the group to continue.
//   - In-place calls pass one span; out-of-place calls pass `send` then `recv`. Sizes:
//       all_reduce      recv.size() == send.size()
//       broadcast       every rank passes the same count; the root's data is copied out
//       reduce          recv significant at the root only (may be empty elsewhere)
//       all_gather      recv.size() == size() · send.size(); in place, rank r's contribution
//                       is block r of the span
//       reduce_scatter  send.size() == size() · recv.size(); in place, rank r's result is
//                       block r of the span
//   - `*_async` calls return a `Work` at once and run in call order with the synchronous
//     calls of the same rank; buffers belong to the collective until its `Work` completes.
#pragma once

#include <concepts>
#include <exception>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::communicator {

/// C models CommunicatorFor<T> if, for element type T:
///   1. `rank()` and `size()` return int: algorithms and strategies divide work by them;
///   2. the blocking collectives `all_reduce`, `broadcast`, `reduce`, `all_gather`,
///      `reduce_scatter` accept std::span<T> in place and (send, recv) out of place, each with
///      an optional trailing `CallOptions`: users hand strata their own buffers, in place to
///      avoid a copy and out of place to keep the input;
///   3. each has an `_async` twin returning `Work`: gradient fusion overlaps communication
///      with computation through them.
/// It leaves out how the group is formed (threads, TCP rendezvous, NCCL unique id) and where
/// memory lives (host or device): those belong to each model.
template <class C, class T>
concept CommunicatorFor = Element<T> &&
    requires(C& c, const C& cc, std::span<T> data, std::span<const T> send, ReduceOp op, int root,
             CallOptions call) {
  { cc.rank() } -> std::same_as<int>;
  { cc.size() } -> std::same_as<int>;
  c.all_reduce(data, op);
  c.all_reduce(send, data, op, call);
  c.broadcast(data, root);
  c.broadcast(send, data, root, call);
  c.reduce(data, op, root);
  c.reduce(send, data, op, root, call);
  c.all_gather(data);
  c.all_gather(send, data, call);
  c.reduce_scatter(data, op);
  c.reduce_scatter(send, data, op, call);
  { c.all_reduce_async(data, op) } -> std::same_as<Work>;
  { c.all_reduce_async(send, data, op, call) } -> std::same_as<Work>;
  { c.broadcast_async(data, root) } -> std::same_as<Work>;
  { c.reduce_async(send, data, op, root) } -> std::same_as<Work>;
  { c.all_gather_async(send, data) } -> std::same_as<Work>;
  { c.reduce_scatter_async(send, data, op) } -> std::same_as<Work>;
};

namespace detail {
template <class C, class List>
struct CommunicatorForAll;
template <class C, class... Ts>
struct CommunicatorForAll<C, TypeList<Ts...>>
    : std::bool_constant<(CommunicatorFor<C, Ts> && ...)> {};
}  // namespace detail

/// C models Communicator if:
///   1. it models CommunicatorFor<T> for every T in `ElementTypes`: a trainer may reduce
///      float32 gradients, bfloat16 activations and int64 counters through one communicator;
///   2. `barrier()` and `barrier_async()` exist: checkpoints and evaluation need a meeting
///      point without data;
///   3. `abort()` fails the group from any thread, waking every pending call on every rank:
///      a failed replica must not leave its peers waiting for their deadline;
///   4. `C::kName` names the model for messages and benchmarks.
template <class C>
concept Communicator = detail::CommunicatorForAll<C, ElementTypes>::value &&
    requires(C& c, CallOptions call, std::string_view reason) {
  { C::kName } -> std::convertible_to<std::string_view>;
  c.barrier();
  c.barrier(call);
  { c.barrier_async() } -> std::same_as<Work>;
  c.abort(reason);
};

/// What `abort(reason)` spreads from rank `rank` in strata's communicators: a PeerFailureError
/// whose root cause reads "<who> aborted: <reason>" (who: "rank R" unless given).
inline std::exception_ptr abort_failure(int rank, std::string_view reason,
                                        std::string_view who = {}) noexcept {
  try {
    const std::string name = who.empty() ? fmt::format("rank {}", rank) : std::string(who);
    return std::make_exception_ptr(PeerFailureError(
        rank, "abort", RootCause{rank, fmt::format("{} aborted: {}", name, reason)}));
  } catch (...) {  // no memory for the text: the group fails all the same
    return std::current_exception();
  }
}

/// Fails `c`'s group because of `error`, from any thread: strata's communicators pass its root
/// cause (a strata::Error's, with its error type) on to every rank; another Communicator gets
/// its text as abort's reason.
template <class C>
void fail_group(C& c, const std::exception_ptr& error) noexcept {
  if constexpr (requires { c.fail(error); }) {
    c.fail(error);
  } else {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      c.abort(e.what());
    } catch (...) {
      c.abort("an exception that is not a std::exception");
    }
  }
}

}  // namespace strata::communicator
