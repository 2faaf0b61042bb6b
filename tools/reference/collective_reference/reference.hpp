// collective_reference/reference.hpp — the value every output element of a reduction must have,
// computed independently of strata: element by element, in rank order, in 64-bit modular
// arithmetic for integers (then truncated to the type, so that wrap-around matches) and in long
// double for floating point.
//
// Integers, min and max are exact: a result must have the reference's value (min and max pick
// an input, compared by value so that -0 equals +0). Copies (broadcast, all_gather, untouched
// buffers) are the callers' to compare bit for bit with `same_bits`. A mean of integers is the
// wrapped sum divided with truncation toward zero (ReduceOp::mean's definition).
//
// Floating-point sums, means and products may be combined in any order (the in-process kernels,
// the TCP ring, recursive doubling and halving-doubling, and hierarchical groups each have their
// own), and float16/bfloat16 may be rounded to the element type after every step (a transport
// sends partial results in the element type). One bound holds for all of them: with n ranks,
// ε the machine epsilon of the element type (elements.hpp: 2^-10 float16, 2^-7 bfloat16, 2^-23
// float, 2^-52 double), Σ|x| the sum of the inputs' magnitudes and ref the exact result,
//   sum      |got - ref| <= n·ε·Σ|x|
//   mean     |got - ref| <= ε·Σ|x| + 2ε·|ref|
//   product  |got - ref| <= 2n·ε·|ref|
// and for float16 and bfloat16 one more unit in the last place at |ref| + bound (the final
// rounding) plus n half-units at the smallest subnormal (roundings near zero are absolute). Each
// of at most n roundings costs at most ε/2 of a partial result no larger than Σ|x| (relative ε/2
// for a product), so the bound is twice what any order can lose; NaN never passes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <collective_reference/elements.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::reference {

/// What an element of a reduction must be: exactly `exact` (`is_exact`: integers, min, max), or
/// `value` within `tolerance`.
template <Element T>
struct Expected {
  long double value = 0;
  long double tolerance = 0;
  T exact{};
  bool is_exact = false;
};

/// How far a floating-point `op` over `ranks` inputs may be from its exact result `value`, given
/// the inputs' magnitudes summed (`abs_sum`); the bound of the file comment. 0 for min and max.
template <Element T>
requires(!std::is_integral_v<T>) long double tolerance(ReduceOp op, int ranks, long double abs_sum,
                                                       long double value) noexcept {
  const long double n = ranks;
  const long double eps = epsilon<T>();
  long double bound = 0;
  switch (op) {
    case ReduceOp::sum:
      bound = n * eps * abs_sum;
      break;
    case ReduceOp::mean:
      bound = eps * abs_sum + 2 * eps * std::fabs(value);
      break;
    case ReduceOp::product:
      bound = 2 * n * eps * std::fabs(value);
      break;
    case ReduceOp::min:
    case ReduceOp::max:
      return 0;
  }
  if constexpr (is_half_precision_v<T>)
    bound += ulp<T>(std::fabs(value) + bound) + n * smallest_subnormal<T>() / 2;
  return bound;
}

namespace detail {

template <Element T, class InputOf>
[[gnu::always_inline]] inline Expected<T> integer_reduction(ReduceOp op, int ranks,
                                                            const InputOf& input_of) {
  auto wide = [](T x) { return static_cast<std::int64_t>(x); };
  std::uint64_t acc = op == ReduceOp::product ? 1 : 0;
  std::int64_t extreme = wide(input_of(0));
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t x = wide(input_of(r));
    if (op == ReduceOp::product) {
      acc *= static_cast<std::uint64_t>(x);
    } else if (op == ReduceOp::min) {
      extreme = x < extreme ? x : extreme;
    } else if (op == ReduceOp::max) {
      extreme = x > extreme ? x : extreme;
    } else {
      acc += static_cast<std::uint64_t>(x);
    }
  }
  Expected<T> expected;
  expected.is_exact = true;
  const T wrapped = static_cast<T>(acc);  // modular since C++20
  if (op == ReduceOp::min || op == ReduceOp::max) {
    expected.exact = static_cast<T>(extreme);
  } else if (op == ReduceOp::mean) {
    expected.exact = static_cast<T>(wide(wrapped) / static_cast<std::int64_t>(ranks));
  } else {
    expected.exact = wrapped;
  }
  expected.value = static_cast<long double>(wide(expected.exact));
  return expected;
}

template <Element T, class InputOf>
[[gnu::always_inline]] inline Expected<T> floating_reduction(ReduceOp op, int ranks,
                                                             const InputOf& input_of) {
  Expected<T> expected;
  if (op == ReduceOp::min || op == ReduceOp::max) {
    T best = input_of(0);
    for (int r = 1; r < ranks; ++r) {
      const T x = input_of(r);
      const bool better = op == ReduceOp::min ? to_long_double(x) < to_long_double(best)
                                              : to_long_double(best) < to_long_double(x);
      if (better) best = x;
    }
    expected.exact = best;
    expected.is_exact = true;
    expected.value = to_long_double(best);
    return expected;
  }
  long double value = op == ReduceOp::product ? 1 : 0;
  long double abs_sum = 0;
  for (int r = 0; r < ranks; ++r) {
    const long double x = to_long_double(input_of(r));
    if (op == ReduceOp::product) {
      value *= x;
    } else {
      value += x;
      abs_sum += std::fabs(x);
    }
  }
  if (op == ReduceOp::mean) value /= ranks;
  expected.value = value;
  expected.tolerance = tolerance<T>(op, ranks, abs_sum, value);
  return expected;
}

}  // namespace detail

/// The reference result of reducing with `op` the inputs of `ranks` ranks, rank 0 first, where
/// `input_of(r)` is rank r's element.
template <Element T, class InputOf>
[[gnu::always_inline]] inline Expected<T> expected_reduction(ReduceOp op, int ranks,
                                                             const InputOf& input_of) {
  if constexpr (std::is_integral_v<T>) {
    return detail::integer_reduction<T>(op, ranks, input_of);
  } else {
    return detail::floating_reduction<T>(op, ranks, input_of);
  }
}

/// The reference result of reducing `inputs` (rank 0 first) with `op`.
template <Element T>
[[gnu::always_inline]] inline Expected<T> expected_reduction(std::span<const T> inputs,
                                                             ReduceOp op) {
  return expected_reduction<T>(op, static_cast<int>(inputs.size()),
                               [&](int r) { return inputs[static_cast<std::size_t>(r)]; });
}

/// True when `got` is an acceptable result for `expected`. Exact results compare by value (so
/// that -0 and +0 are equal, as min/max may pick either); NaN is never acceptable.
template <Element T>
[[gnu::always_inline]] inline bool matches(T got, const Expected<T>& expected) noexcept {
  if constexpr (std::is_integral_v<T>) {
    return got == expected.exact;
  } else {
    if (expected.is_exact) return to_long_double(got) == to_long_double(expected.exact);
    return std::fabs(to_long_double(got) - expected.value) <= expected.tolerance;
  }
}

/// "-3", or "0.25 ± 1.2e-07" for a result with a tolerance.
template <Element T>
std::string describe(const Expected<T>& expected) {
  if (expected.is_exact) return format_value(expected.exact);
  return fmt::format("{} ± {:.3g}", static_cast<double>(expected.value),
                     static_cast<double>(expected.tolerance));
}

}  // namespace strata::reference
