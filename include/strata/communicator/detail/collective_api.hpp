// strata/communicator/detail/collective_api.hpp — the typed collective calls every communicator
// offers, written once.
//
// A communicator derives from `CollectiveApi<Derived>` and provides:
//   int rank() const; int size() const;
//   void run(const CollectiveCall&, const CallOptions&);      blocking, after earlier async calls
//   Work submit(const CollectiveCall&, const CallOptions&);   queued behind earlier async calls
//   [[noreturn]] void fail_usage(Collective, std::string_view what, std::string_view what_to_do);
// This base turns each typed call into a checked `CollectiveCall` (span sizes, root, overlap,
// and the reduction kernels of its type), so every model enforces the same rules with the same
// messages. A communicator made of others hands them checked calls through `CallAccess`.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/core/reduce_op.hpp>

#if STRATA_HEADER_ONLY
// A typed call instantiates the kernels of its type, defined here.
#include <strata/core/reduce.hpp>
#endif

namespace strata::communicator::detail {

/// Runs an already checked `CollectiveCall` on a communicator (which befriends this): how
/// HierarchicalCommunicator passes its stages to its parts, and GradientBuckets its buckets,
/// without going back through the typed calls, which would instantiate every element type a
/// run-time tag may name.
struct CallAccess {
  /// Whether `Communicator` takes checked calls (strata's communicators do).
  template <class Communicator>
  static constexpr bool kTakesCalls = requires(Communicator& c, const CollectiveCall& call,
                                               const CallOptions& options) {
    c.run(call, options);
    { c.submit(call, options) } -> std::same_as<Work>;
  };

  template <class Communicator>
  static void run(Communicator& communicator, const CollectiveCall& call,
                  const CallOptions& options) {
    communicator.run(call, options);
  }
  template <class Communicator>
  static Work submit(Communicator& communicator, const CollectiveCall& call,
                     const CallOptions& options) {
    return communicator.submit(call, options);
  }
};

template <class Derived>
class CollectiveApi {
 public:
  // --- all_reduce: every rank ends with op over all ranks' data.
  template <Element T>
  void all_reduce(std::span<T> data, ReduceOp op, CallOptions call = {}) {
    self().run(in_place<Collective::all_reduce>(data, op), call);
  }
  template <Element T>
  void all_reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
                  CallOptions call = {}) {
    self().run(out_of_place<Collective::all_reduce>(send, recv, op), call);
  }
  template <Element T>
  Work all_reduce_async(std::span<T> data, ReduceOp op, CallOptions call = {}) {
    return self().submit(in_place<Collective::all_reduce>(data, op), call);
  }
  template <Element T>
  Work all_reduce_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                        ReduceOp op, CallOptions call = {}) {
    return self().submit(out_of_place<Collective::all_reduce>(send, recv, op), call);
  }

  // --- broadcast: every rank ends with the root's data.
  template <Element T>
  void broadcast(std::span<T> data, int root, CallOptions call = {}) {
    self().run(in_place<Collective::broadcast>(data, ReduceOp::sum, root), call);
  }
  template <Element T>
  void broadcast(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                 CallOptions call = {}) {
    self().run(out_of_place<Collective::broadcast>(send, recv, ReduceOp::sum, root), call);
  }
  template <Element T>
  Work broadcast_async(std::span<T> data, int root, CallOptions call = {}) {
    return self().submit(in_place<Collective::broadcast>(data, ReduceOp::sum, root), call);
  }
  template <Element T>
  Work broadcast_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv, int root,
                       CallOptions call = {}) {
    return self().submit(out_of_place<Collective::broadcast>(send, recv, ReduceOp::sum, root),
                         call);
  }

  // --- reduce: the root ends with op over all ranks' data; other ranks' outputs untouched.
  template <Element T>
  void reduce(std::span<T> data, ReduceOp op, int root, CallOptions call = {}) {
    self().run(in_place<Collective::reduce>(data, op, root), call);
  }
  template <Element T>
  void reduce(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
              int root, CallOptions call = {}) {
    self().run(out_of_place<Collective::reduce>(send, recv, op, root), call);
  }
  template <Element T>
  Work reduce_async(std::span<T> data, ReduceOp op, int root, CallOptions call = {}) {
    return self().submit(in_place<Collective::reduce>(data, op, root), call);
  }
  template <Element T>
  Work reduce_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
                    int root, CallOptions call = {}) {
    return self().submit(out_of_place<Collective::reduce>(send, recv, op, root), call);
  }

  // --- all_gather: block r of every rank's output is rank r's contribution.
  template <Element T>
  void all_gather(std::span<T> data, CallOptions call = {}) {
    self().run(in_place<Collective::all_gather>(data), call);
  }
  template <Element T>
  void all_gather(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                  CallOptions call = {}) {
    self().run(out_of_place<Collective::all_gather>(send, recv), call);
  }
  template <Element T>
  Work all_gather_async(std::span<T> data, CallOptions call = {}) {
    return self().submit(in_place<Collective::all_gather>(data), call);
  }
  template <Element T>
  Work all_gather_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                        CallOptions call = {}) {
    return self().submit(out_of_place<Collective::all_gather>(send, recv), call);
  }

  // --- reduce_scatter: rank r ends with op over block r of all ranks' data.
  template <Element T>
  void reduce_scatter(std::span<T> data, ReduceOp op, CallOptions call = {}) {
    self().run(in_place<Collective::reduce_scatter>(data, op), call);
  }
  template <Element T>
  void reduce_scatter(std::span<const std::type_identity_t<T>> send, std::span<T> recv, ReduceOp op,
                      CallOptions call = {}) {
    self().run(out_of_place<Collective::reduce_scatter>(send, recv, op), call);
  }
  template <Element T>
  Work reduce_scatter_async(std::span<T> data, ReduceOp op, CallOptions call = {}) {
    return self().submit(in_place<Collective::reduce_scatter>(data, op), call);
  }
  template <Element T>
  Work reduce_scatter_async(std::span<const std::type_identity_t<T>> send, std::span<T> recv,
                            ReduceOp op, CallOptions call = {}) {
    return self().submit(out_of_place<Collective::reduce_scatter>(send, recv, op), call);
  }

  // --- barrier: returns once every rank has called it.
  void barrier(CallOptions call = {}) { self().run(CollectiveCall{}, call); }
  Work barrier_async(CallOptions call = {}) { return self().submit(CollectiveCall{}, call); }

 protected:
  CollectiveApi() = default;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }

  /// Only the reducing collectives carry T's kernels: a broadcast or all_gather of T
  /// instantiates none of them.
  template <Collective kKind, Element T>
  static constexpr const ReduceKernels* kernels_for() noexcept {
    if constexpr (reduces(kKind))
      return &reduce_kernels_of<T>;
    else
      return nullptr;
  }

  template <Collective kind, Element T>
  CollectiveCall in_place(std::span<T> data, ReduceOp op = ReduceOp::sum, int root = 0) {
    CollectiveCall call{kind, data_type_of<T>, data.size(), op,
                        root, data.data(),     data.data(), kernels_for<kind, T>()};
    if (kind == Collective::all_gather || kind == Collective::reduce_scatter) {
      const auto n = static_cast<std::size_t>(self().size());
      if (data.size() % n != 0)
        self().fail_usage(kind,
                          fmt::format("in-place {} needs a span of size() · count elements, got "
                                      "{} elements for {} ranks",
                                      to_string(kind), data.size(), n),
                          "pass a span whose size is a multiple of the group size");
      call.count = data.size() / n;
      T* own_block = data.data() + static_cast<std::size_t>(self().rank()) * call.count;
      if (kind == Collective::all_gather)
        call.send = own_block;
      else
        call.recv = own_block;
    }
    check_root(call);
    return call;
  }

  template <Collective kind, Element T>
  CollectiveCall out_of_place(std::span<const T> send, std::span<T> recv,
                              ReduceOp op = ReduceOp::sum, int root = 0) {
    CollectiveCall call{kind, data_type_of<T>, send.size(), op,
                        root, send.data(),     recv.data(), kernels_for<kind, T>()};
    check_root(call);
    check_overlap(kind, send, recv);
    const auto n = static_cast<std::size_t>(self().size());
    std::size_t expected = send.size();
    std::string_view rule = "recv.size() == send.size()";
    if (kind == Collective::all_gather) {
      expected = n * send.size();
      rule = "recv.size() == size() · send.size()";
    } else if (kind == Collective::reduce_scatter) {
      call.count = recv.size();
      expected = n * recv.size();
      if (send.size() != expected)
        self().fail_usage(kind,
                          fmt::format("send has {} elements but {} ranks × recv {} need {}",
                                      send.size(), n, recv.size(), expected),
                          "reduce_scatter needs send.size() == size() · recv.size()");
      return call;
    } else if (kind == Collective::reduce && root != self().rank() && recv.empty()) {
      call.recv = nullptr;  // a non-root rank may pass no output
      return call;
    }
    if (recv.size() != expected)
      self().fail_usage(kind,
                        fmt::format("recv has {} elements, expected {}", recv.size(), expected),
                        fmt::format("{} needs {}", to_string(kind), rule));
    return call;
  }

  // Identical spans (in place), disjoint spans, or the in-place layout of all_gather (send is
  // block rank() of recv) and reduce_scatter (recv is block rank() of send); anything else
  // would let this rank's writes corrupt the input its peers read.
  template <Element T>
  void check_overlap(Collective kind, std::span<const T> send, std::span<T> recv) {
    const T* s = send.data();
    const T* r = recv.data();
    if (send.empty() || recv.empty()) return;
    const bool disjoint =
        std::less_equal<>{}(s + send.size(), r) || std::less_equal<>{}(r + recv.size(), s);
    const auto block = static_cast<std::size_t>(self().rank());
    const bool in_place = (s == r && send.size() == recv.size()) ||
                          (kind == Collective::all_gather && s == r + block * send.size()) ||
                          (kind == Collective::reduce_scatter && r == s + block * recv.size());
    if (disjoint || in_place) return;
    self().fail_usage(kind, "send and recv partially overlap",
                      "pass the same span for an in-place call, or spans that do not overlap");
  }

  void check_root(const CollectiveCall& call) {
    if (has_root(call.kind) && (call.root < 0 || call.root >= self().size()))
      self().fail_usage(
          call.kind,
          fmt::format("root {} is not a rank of this group of {}", call.root, self().size()),
          "pass a root in [0, size())");
  }
};

}  // namespace strata::communicator::detail
