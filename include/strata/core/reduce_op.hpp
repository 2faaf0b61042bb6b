// strata/core/reduce_op.hpp — the reduction operators every collective understands.
#pragma once

#include <strata/core/enum_names.hpp>

#include <array>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

namespace strata {

/// How the values of all ranks are combined, element by element.
///
/// - `sum`, `product`: on integers they wrap around (two's complement), as NCCL and MPI do in
///   practice; on floating point they follow IEEE arithmetic (NaN and inf propagate).
/// - `min`, `max`: exact. If an input is NaN the result for that element is unspecified.
/// - `mean`: the sum divided by the number of contributing ranks. On integers, the wrapped sum
///   divided with truncation toward zero. Equivalent to TF's `ReduceOp.MEAN`.
///
/// 16-bit floating-point types (float16, bfloat16) are accumulated in float and rounded once.
enum class ReduceOp : std::uint8_t { sum, product, min, max, mean };

}  // namespace strata

template <>
struct strata::EnumNames<strata::ReduceOp> {
  static constexpr std::array<std::string_view, 5> kNames{"sum", "product", "min", "max", "mean"};
};

namespace strata {

inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::product, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::mean};

}  // namespace strata
