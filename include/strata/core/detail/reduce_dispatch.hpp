// strata/core/detail/reduce_dispatch.hpp — reduce_n, accumulate and divide for a given
// instruction set: argument checks, then the kernel chosen by op, element type and set.
//
// The public functions (core/reduce.hpp) call these with best_isa(); tests and benchmarks call
// them with each set the CPU has.
#pragma once

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/detail/reduce_half_blocks.hpp>
#include <strata/core/detail/reduce_isa.hpp>
#include <strata/core/detail/reduce_kernels.hpp>
#include <strata/core/detail/reduce_ops.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::detail {

/// The block loop of `reduce_n` for k >= 2 inputs, compiled for `kIsa`.
template <Isa kIsa, class T, class F, class Fin>
[[gnu::always_inline]] inline void reduce_blocks(T* out, const T* const* inputs, std::size_t k,
                                                 std::size_t count, F f, Fin fin,
                                                 bool integer_mean) {
  if constexpr (is_half_precision_v<T>) {
    reduce_half_blocks<kIsa>(out, inputs, k, count, f, fin);
  } else {
    reduce_elementwise(out, inputs, k, count, f, fin, integer_mean);
  }
}

inline bool is_valid(ReduceOp op) noexcept {
  return static_cast<unsigned>(op) <= static_cast<unsigned>(ReduceOp::mean);
}

inline void check_op(ReduceOp op, std::string_view operation) {
  if (!is_valid(op)) {
    throw UsageError(-1, operation,
                     fmt::format("{} is not a ReduceOp value", static_cast<unsigned>(op)),
                     "pass one of ReduceOp::sum, product, min, max or mean");
  }
}

/// True when [a, a + bytes) and [b, b + bytes) share a byte but do not start together.
inline bool overlaps_unequal(const void* a, const void* b, std::size_t bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x != y && x < y + bytes && y < x + bytes;
}

/// reduce_n with its kernels compiled for `isa` (tests run each set the CPU has).
template <Element T>
void reduce_n_on(Isa isa, std::span<T> out, std::span<const T* const> inputs, ReduceOp op) {
  if (inputs.empty()) {
    throw UsageError(-1, "reduce_n", "called with no inputs",
                     "pass at least one input (reducing a single input copies it)");
  }
  check_op(op, "reduce_n");
  const std::size_t count = out.size();
  if (count == 0) return;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j] == nullptr) {
      throw UsageError(-1, "reduce_n", fmt::format("input {} is null", j),
                       "every input must point at out.size() elements");
    }
    if (overlaps_unequal(out.data(), inputs[j], out.size_bytes())) {
      throw UsageError(-1, "reduce_n",
                       fmt::format("input {} overlaps the output without being equal to it", j),
                       "reduce exactly in place (out == input) or into separate memory");
    }
  }
  const std::size_t k = inputs.size();
  if (k == 1) {
    // Every op of a single input is the input itself (a mean divides by 1).
    if (out.data() != inputs[0]) std::memcpy(out.data(), inputs[0], out.size_bytes());
    return;
  }
  T* const o = out.data();
  const T* const* const in = inputs.data();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        if (op == ReduceOp::mean) {
          if constexpr (std::is_integral_v<T>) {
            reduce_blocks<kSet>(o, in, k, count, SumFn{}, Narrow<T>{}, true);
          } else {
            const NarrowMean<T> fin{static_cast<ReduceAcc<T>>(k)};
            reduce_blocks<kSet>(o, in, k, count, SumFn{}, fin, false);
          }
          return;
        }
        with_reduce_fn(
            op, [&](auto f) __attribute__((always_inline)) {
              reduce_blocks<kSet>(o, in, k, count, f, Narrow<T>{}, false);
            });
      });
}

/// accumulate with its kernels compiled for `isa`.
template <Element T>
void accumulate_on(Isa isa, std::span<T> inout, std::span<const T> in, ReduceOp op) {
  if (inout.size() != in.size()) {
    throw UsageError(-1, "accumulate",
                     fmt::format("inout has {} elements but in has {}", inout.size(), in.size()),
                     "pass spans of the same length");
  }
  check_op(op, "accumulate");
  if (overlaps_unequal(inout.data(), in.data(), inout.size_bytes())) {
    throw UsageError(-1, "accumulate", "inout and in overlap", "accumulate from a separate buffer");
  }
  T* const p = inout.data();
  const T* const q = in.data();
  const std::size_t count = inout.size();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        with_reduce_fn(
            op, [&](auto f) __attribute__((always_inline)) {
              if constexpr (is_half_precision_v<T>) {
                // The two-input reduce_n into inout: one rounding, as below.
                const T* const inputs[] = {p, q};
                reduce_half_blocks<kSet>(p, inputs, 2, count, f, Narrow<T>{});
              } else {
                for_each_block(
                    p, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
                      if (p == q) {
                        accumulate_self<T>(p + base, n, f);
                      } else {
                        accumulate_disjoint<T>(p + base, q + base, n, f);
                      }
                    });
              }
            });
      });
}

/// divide with its kernels compiled for `isa`.
template <Element T>
void divide_on(Isa isa, std::span<T> data, std::size_t divisor) {
  if (divisor == 0) {
    throw UsageError(-1, "divide", "the divisor is 0",
                     "divide by the number of contributions, which is at least 1");
  }
  T* const p = data.data();
  const std::size_t count = data.size();
  run_on(
      isa, [&](auto set) __attribute__((always_inline)) {
        constexpr Isa kSet = decltype(set)::value;
        if constexpr (is_half_precision_v<T>) {
          const T* const inputs[] = {p};
          const NarrowMean<T> quotient{static_cast<ReduceAcc<T>>(divisor)};
          reduce_half_blocks<kSet>(p, inputs, 1, count, SumFn{}, quotient);
        } else {
          for_each_block(
              p, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
                divide_block(p + base, n, divisor);
              });
        }
      });
}

}  // namespace strata::detail
