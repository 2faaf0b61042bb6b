// strata/core/detail/reduce_kernels.hpp — the portable block loops of reduce_n, accumulate and
// divide.
//
// Plain loops over blocks of kReduceBlock elements, branch-free inside, so that the compiler
// vectorizes them for whichever instruction set they are inlined into (reduce_isa.hpp).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <strata/core/detail/reduce_convert.hpp>

namespace strata::detail {

/// Elements per block: the accumulator (4 KiB of float) stays in L1 between inputs.
inline constexpr std::size_t kReduceBlock = 1024;

/// Calls `body(base, n)` for consecutive blocks covering [0, count) of the array at `written`.
/// Full blocks pass `n` as a compile-time constant, so their loops have a known trip count and
/// vectorize even under g++ -O2's cheap cost model; the first and last, partial blocks pass a
/// run-time `n`. The first ends where `written` reaches a cache line, so that the full blocks'
/// stores, and the loads of inputs placed alike (as allocators place them), do not straddle two
/// lines: vectors that straddle two lines are slower to load and store, in L2 above all.
template <class T, class Body>
[[gnu::always_inline]] inline void for_each_block(const T* written, std::size_t count,
                                                  Body&& body) {
  constexpr std::size_t kLine = 64;
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(written) % kLine;
  std::size_t base = 0;
  if (offset != 0 && offset % sizeof(T) == 0) {
    base = std::min(count, (kLine - offset) / sizeof(T));
    body(std::size_t{0}, base);
  }
  for (; count - base >= kReduceBlock; base += kReduceBlock) {
    body(base, std::integral_constant<std::size_t, kReduceBlock>{});
  }
  if (base < count) body(base, count - base);
}

// The loops. `__restrict` is valid on each: the accumulator is a local array, and every
// caller has checked that `out` is disjoint from the other pointer(s) (the equal case has a
// loop of its own). Pointers that are only read may alias each other.

template <class T, class F, class N>
[[gnu::always_inline]] inline void combine_two(ReduceAcc<T>* __restrict acc, const T* __restrict a,
                                               const T* __restrict b, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = f(widen<T>(a[i]), widen<T>(b[i]));
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void combine_next(ReduceAcc<T>* __restrict acc,
                                                const T* __restrict in, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = f(acc[i], widen<T>(in[i]));
}

template <class T, class Fin, class N>
[[gnu::always_inline]] inline void store(T* __restrict out, const ReduceAcc<T>* __restrict acc, N n,
                                         Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(acc[i]);
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void finish(T* __restrict out, const ReduceAcc<T>* __restrict acc,
                                          const T* __restrict last, N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(acc[i], widen<T>(last[i])));
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void finish_in_place(T* __restrict out,
                                                   const ReduceAcc<T>* __restrict acc, N n, F f,
                                                   Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(acc[i], widen<T>(out[i])));
}

template <class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void fused_two(T* __restrict out, const T* __restrict a,
                                             const T* __restrict b, N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = fin(f(widen<T>(a[i]), widen<T>(b[i])));
}

// Two inputs, one of which is `out`: operands stay in input order.
template <bool kOutIsFirst, class T, class F, class Fin, class N>
[[gnu::always_inline]] inline void fused_two_in_place(T* __restrict out, const T* __restrict other,
                                                      N n, F f, Fin fin) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const ReduceAcc<T> mine = widen<T>(out[i]);
    const ReduceAcc<T> theirs = widen<T>(other[i]);
    out[i] = kOutIsFirst ? fin(f(mine, theirs)) : fin(f(theirs, mine));
  }
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void accumulate_disjoint(T* __restrict inout, const T* __restrict in,
                                                       N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    inout[i] = narrow<T>(f(widen<T>(inout[i]), widen<T>(in[i])));
}

template <class T, class F, class N>
[[gnu::always_inline]] inline void accumulate_self(T* __restrict inout, N n, F f) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const ReduceAcc<T> value = widen<T>(inout[i]);
    inout[i] = narrow<T>(f(value, value));
  }
}

/// `x / divisor` with truncation toward zero, for any divisor >= 1 (it may exceed T's range).
template <std::integral T, class N>
[[gnu::always_inline]] inline void divide_integers(T* data, N n, std::size_t divisor) noexcept {
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<T>::max());
  if (divisor <= kMax) {
    const auto d = static_cast<T>(divisor);
    for (std::size_t i = 0; i < n; ++i)
      data[i] = static_cast<T>(data[i] / d);
    return;
  }
  // |x| <= divisor now: the quotient is 0, except min / (max + 1) == -1 for signed T.
  const bool minus_one_for_min = std::is_signed_v<T> && divisor == kMax + 1;
  for (std::size_t i = 0; i < n; ++i) {
    data[i] = (minus_one_for_min && data[i] == std::numeric_limits<T>::min()) ? T(-1) : T(0);
  }
}

template <class T, class N>
[[gnu::always_inline]] inline void divide_block(T* data, N n, std::size_t divisor) noexcept {
  if constexpr (std::is_integral_v<T>) {
    divide_integers(data, n, divisor);
  } else {
    const auto d = static_cast<ReduceAcc<T>>(divisor);
    for (std::size_t i = 0; i < n; ++i)
      data[i] = narrow<T>(widen<T>(data[i]) / d);
  }
}

/// The block loop of `reduce_n` for k >= 2 inputs, element by element; `integer_mean` divides
/// each finished block.
template <class T, class F, class Fin>
[[gnu::always_inline]] inline void reduce_elementwise(T* out, const T* const* inputs, std::size_t k,
                                                      std::size_t count, F f, Fin fin,
                                                      bool integer_mean) {
  alignas(64) ReduceAcc<T> acc[kReduceBlock];
  for_each_block(
      out, count, [&](std::size_t base, auto n) __attribute__((always_inline)) {
        T* o = out + base;
        const T* first = inputs[0] + base;
        const T* second = inputs[1] + base;
        if (k == 2) {
          // One pass in every placement but the degenerate out == inputs[0] == inputs[1].
          if (o != first && o != second) {
            fused_two<T>(o, first, second, n, f, fin);
          } else if (first == second) {
            combine_two<T>(acc, first, second, n, f);
            store<T>(o, acc, n, fin);
          } else if (o == first) {
            fused_two_in_place<true>(o, second, n, f, fin);
          } else {
            fused_two_in_place<false>(o, first, n, f, fin);
          }
        } else {
          combine_two<T>(acc, first, second, n, f);
          for (std::size_t j = 2; j + 1 < k; ++j)
            combine_next<T>(acc, inputs[j] + base, n, f);
          const T* last = inputs[k - 1] + base;
          if (o == last) {
            finish_in_place<T>(o, acc, n, f, fin);
          } else {
            finish<T>(o, acc, last, n, f, fin);
          }
        }
        if (integer_mean) divide_block(o, n, k);  // while the block is still in L1
      });
}

}  // namespace strata::detail
