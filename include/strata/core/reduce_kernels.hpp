// strata/core/reduce_kernels.hpp — the reduction kernels of one element type behind function
// pointers, for the layers that move bytes and a `DataType` tag.
//
// A typed call (`all_reduce(std::span<float>, ...)`) puts the table of its own type in its
// `CollectiveCall`; the algorithms and transports below reduce through it. A unit that
// all-reduces floats so instantiates the float kernels only, not those of every element type,
// and the type-erased layers include this light header instead of the kernels (core/reduce.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include <strata/config.hpp>
#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata {

/// The kernels of one element type (core/reduce.hpp), type-erased.
struct ReduceKernels {
  DataType type;
  /// `reduce_n` over `num_inputs` arrays of `count` elements of `type`.
  void (*reduce_n)(void* out, const void* const* inputs, std::size_t num_inputs, std::size_t count,
                   ReduceOp op);
  /// `divide` of `count` elements of `type`.
  void (*divide)(void* data, std::size_t count, std::size_t divisor);
};

namespace detail {
// Defined in core/reduce.hpp.
template <Element T>
void reduce_n_erased(void* out, const void* const* inputs, std::size_t num_inputs,
                     std::size_t count, ReduceOp op);
template <Element T>
void divide_erased(void* data, std::size_t count, std::size_t divisor);
}  // namespace detail

/// The kernel table of `T`. Its `reduce_n` throws as `reduce_n<T>`, and UsageError (operation
/// "reduce_n") when a needed pointer is null. Code that has only a `DataType` picks a table
/// with `visit_data_type`, and so instantiates every element type's kernels, knowingly.
template <Element T>
inline constexpr ReduceKernels reduce_kernels_of{data_type_of<T>, &detail::reduce_n_erased<T>,
                                                 &detail::divide_erased<T>};

/// The kernels of `call`'s element type.
/// @throws UsageError (operation: the call's collective) when the call carries none, or those
///         of another type: a call built by hand must set `kernels = &reduce_kernels_of<T>`.
inline const ReduceKernels& kernels_of(const CollectiveCall& call) {
  if (call.kernels == nullptr || call.kernels->type != call.type) {
    throw UsageError(-1, to_string(call.kind),
                     fmt::format("the call's reduction kernels are {}, its type is {}",
                                 call.kernels == nullptr ? std::string_view("missing")
                                                         : to_string(call.kernels->type),
                                 to_string(call.type)),
                     "build the CollectiveCall with kernels = &reduce_kernels_of<T> for its T");
  }
  return *call.kernels;
}

}  // namespace strata

// Declares (extern) or defines the erased kernels of element type T, for every element type.
#define STRATA_ERASED_KERNELS(prefix, T)                                                  \
  prefix template void detail::reduce_n_erased<T>(void*, const void* const*, std::size_t, \
                                                  std::size_t, ReduceOp);                 \
  prefix template void detail::divide_erased<T>(void*, std::size_t, std::size_t);
// `macro(prefix, T)` for every element type T: the one list the explicit instantiations use.
// clang-format off
#define STRATA_FOR_EVERY_ELEMENT(macro, prefix) \
  macro(prefix, std::int8_t)                    \
  macro(prefix, std::uint8_t)                   \
  macro(prefix, std::int32_t)                   \
  macro(prefix, std::int64_t)                   \
  macro(prefix, float16)                        \
  macro(prefix, bfloat16)                       \
  macro(prefix, float)                          \
  macro(prefix, double)
// clang-format on

#if !STRATA_HEADER_ONLY
namespace strata {
// Compiled once, in the library (core/impl/reduce.ipp). Header-only, a unit that takes a table
// also includes core/reduce.hpp, where they are defined.
STRATA_FOR_EVERY_ELEMENT(STRATA_ERASED_KERNELS, extern)
}  // namespace strata
#endif
