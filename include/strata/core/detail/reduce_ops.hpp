// strata/core/detail/reduce_ops.hpp — the reduction operators and finishers the kernels apply.
//
// Operators combine two accumulators; finishers (Narrow, NarrowMean) turn a finished
// accumulator into an element. Both are empty or tiny function objects, so every kernel is
// instantiated, and inlined, per operator.
#pragma once

#include <type_traits>

#include <strata/core/detail/reduce_convert.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::detail {

// The operators, on the accumulator type. Integer sum and product run in the unsigned
// counterpart so that wrap-around is defined behaviour; the conversion back is modular.
struct SumFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProductFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// Select forms that map onto minps/maxps (and pmin/pmax); ties keep the earlier operand.
struct MinFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    return b < a ? b : a;
  }
};

struct MaxFn {
  template <class A>
  A operator()(A a, A b) const noexcept {
    return a < b ? b : a;
  }
};

/// Turns a finished accumulator into an element.
template <class T>
struct Narrow {
  T operator()(ReduceAcc<T> value) const noexcept { return narrow<T>(value); }
};

/// Finishes a floating-point mean before the single rounding.
template <class T>
struct NarrowMean {
  ReduceAcc<T> divisor;
  T operator()(ReduceAcc<T> value) const noexcept { return narrow<T>(value / divisor); }
};

/// Applies `f` to `op`'s operator object (mean -> sum, see the callers).
template <class F>
[[gnu::always_inline]] inline decltype(auto) with_reduce_fn(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::product:
      return f(ProductFn{});
    case ReduceOp::min:
      return f(MinFn{});
    case ReduceOp::max:
      return f(MaxFn{});
    case ReduceOp::sum:
    case ReduceOp::mean:
      break;
  }
  return f(SumFn{});
}

}  // namespace strata::detail
