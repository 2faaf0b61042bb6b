// strata/transport/plan.hpp — a collective as a plan of messages, for message-passing links.
//
// Algorithms over a network (TCP now, NCCL's point-to-point later) describe one rank's part of
// a collective as sends and receives; the transport's `Link::transfer(sends, recvs, handler)`
// runs them all at once. Dependencies make pipelining explicit: a send that forwards received
// data waits for that receive, and a receive whose handler overwrites memory a send still reads
// waits for that send. Messages to and from one peer keep their order.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

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

/// What a link calls with receive j's index once it is handled (an algorithm's reduction),
/// whatever callable the algorithm passes: a reference to it, not a copy, so it must outlive the
/// transfer it is passed to. Being one type, it lets the transport's plan runner be compiled
/// once rather than once per algorithm.
class ReceiveHandler {
 public:
  // Implicit, as algorithms pass their lambdas; not for another ReceiveHandler (copied as is).
  template <class F>
  ReceiveHandler(F&& handler) noexcept
      requires(!std::is_same_v<std::remove_cvref_t<F>, ReceiveHandler> &&
               std::is_invocable_v<F&, std::size_t>) {
    using Callable = std::remove_reference_t<F>;
    if constexpr (std::is_function_v<Callable>) {
      // A function: its address, through a function pointer type any other converts to and back.
      target_.function = reinterpret_cast<void (*)()>(&handler);
      call_ = [](Target target, std::size_t j) { reinterpret_cast<Callable*>(target.function)(j); };
    } else {
      target_.object = const_cast<void*>(static_cast<const void*>(std::addressof(handler)));
      call_ = [](Target target, std::size_t j) { (*static_cast<Callable*>(target.object))(j); };
    }
  }

  void operator()(std::size_t j) const { call_(target_, j); }

 private:
  union Target {
    void* object;
    void (*function)();
  };
  Target target_{};
  void (*call_)(Target target, std::size_t j);
};

}  // namespace strata::transport
