// strata/core/collective.hpp — the description of one collective call.
//
// Every communicator turns a typed call (`all_reduce(std::span<float>, ReduceOp::sum)`) into a
// `CollectiveCall`: what the call is, with which count, type, op and root, and where its bytes
// are. Ranks compare these descriptions before moving any data, so a rank that disagrees gets a
// `MismatchError` rather than a hang or reinterpreted bytes. It lives in core because every
// layer below the communicators speaks it: algorithms take one, transports frame it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/enum_names.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata {

struct ReduceKernels;  // core/reduce_kernels.hpp

/// The collectives a Communicator offers.
enum class Collective : std::uint8_t {
  all_reduce,
  broadcast,
  reduce,
  all_gather,
  reduce_scatter,
  barrier
};

}  // namespace strata

template <>
struct strata::EnumNames<strata::Collective> {
  static constexpr std::array<std::string_view, 6> kNames{
      "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"};
};

namespace strata {

/// True when `kind` combines values with a ReduceOp (and so must agree on it across ranks).
constexpr bool reduces(Collective kind) noexcept {
  return kind == Collective::all_reduce || kind == Collective::reduce ||
         kind == Collective::reduce_scatter;
}

/// True when `kind` has a root rank (which must agree across ranks).
constexpr bool has_root(Collective kind) noexcept {
  return kind == Collective::broadcast || kind == Collective::reduce;
}

/// One rank's view of one collective call.
///
/// `count` is the per-rank element count the collective is defined by: the buffer length for
/// all_reduce, broadcast and reduce; the contribution of each rank for all_gather (the output
/// holds size·count); the output block of each rank for reduce_scatter (the input holds
/// size·count). `send` and `recv` may be equal (in place); `recv` may be null where the
/// collective leaves this rank's output undefined (reduce on a non-root rank).
struct CollectiveCall {
  Collective kind = Collective::barrier;
  DataType type = DataType::uint8;
  std::size_t count = 0;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const void* send = nullptr;
  void* recv = nullptr;
  /// The reduction kernels of `type` (`&reduce_kernels_of<T>`), set by the typed reducing calls
  /// (a broadcast or gather carries none), so that the type-erased layers below reduce without
  /// instantiating every element type. Not compared across ranks: it is this process's address
  /// of what `type` already names.
  const ReduceKernels* kernels = nullptr;

  /// True when both calls are the same collective in every field ranks must agree on.
  friend constexpr bool agrees(const CollectiveCall& a, const CollectiveCall& b) noexcept {
    return a.kind == b.kind && a.type == b.type && a.count == b.count &&
           (!reduces(a.kind) || a.op == b.op) && (!has_root(a.kind) || a.root == b.root);
  }
};

/// "all_reduce(count=1024, type=float, op=sum)": the fields that ranks must agree on.
inline std::string describe(const CollectiveCall& call) {
  std::string text =
      fmt::format("{}(count={}, type={}", to_string(call.kind), call.count, to_string(call.type));
  if (reduces(call.kind)) text += fmt::format(", op={}", to_string(call.op));
  if (has_root(call.kind)) text += fmt::format(", root={}", call.root);
  text += ')';
  return text;
}

}  // namespace strata
