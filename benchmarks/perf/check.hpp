// benchmarks/perf/check.hpp — strata-perf's data check: inputs that depend on the rank, the
// index and the check, and an independent reference for every collective's outputs.
//
// Inputs: a bijective 64-bit mix of (seed, rank, index). Integers take the whole range of their
// type (sums and products wrap, as strata's do; products use odd values so that they never
// collapse to 0). Floating point: uniform in [-1, 1) on a grid of 2^-23 (2^-52 for double),
// rounded to nearest for half and bfloat16; for products 1 ± 1/(2n) at most, so that the
// product of n ranks stays in [0.6, 1.7] and never overflows or underflows.
//
// Reference: computed here element by element, in rank order, in 64-bit modular arithmetic for
// integers (then truncated to the type, so wrap-around matches) and in long double for floating
// point. Integers, min, max and copies must match exactly. Floating-point sums, means and
// products may be reduced in any order (the TCP ring and recursive doubling each have their
// own) and half/bfloat16 may be rounded after every step over TCP, so they are compared within
// a bound that holds for any order with a rounding after each step:
//   sum      n·ε·Σ|x|          mean   ε·Σ|x| + 2ε·|ref|          product   2n·ε·|ref|
// with ε the machine epsilon of the element type (2^-10 for half, 2^-7 for bfloat16, 2^-23 for
// float, 2^-52 for double); half and bfloat16 add one unit in the last place at the result and
// n half-units at the smallest subnormal (roundings near zero are absolute, not relative).
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

/// splitmix64's finalizer: a bijection on 64-bit values with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// The byte outputs are filled with before a checked call: all ones is NaN for every floating
/// type and -1 (or the maximum) for integers, so an output the collective never wrote is wrong.
inline constexpr unsigned char kPoisonByte = 0xff;

/// Inputs and reference of one checked call of a collective with element type T.
template <Element T>
class DataCheck {
 public:
  /// `seed` tells checks apart (a stale output of an earlier call is wrong for this one);
  /// `ranks` is the group size.
  DataCheck(std::uint64_t seed, ReduceOp op, int ranks) noexcept
      : seed_(mix64(seed ^ (static_cast<std::uint64_t>(data_type_of<T>) << 56))),
        op_(op),
        ranks_(ranks) {}

  ReduceOp op() const noexcept { return op_; }
  int ranks() const noexcept { return ranks_; }

  /// Rank `rank`'s input at `index`.
  T input(int rank, std::size_t index) const noexcept {
    const std::uint64_t h =
        mix64(seed_ + static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ULL +
              (static_cast<std::uint64_t>(rank) + 1) * 0xc2b2ae3d27d4eb4fULL);
    const bool product = op_ == ReduceOp::product;
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(product ? (h | 1u) : h);  // modular: the whole range of T
    } else if constexpr (std::same_as<T, double>) {
      const double unit = static_cast<double>(h >> 11) * 0x1p-53;  // [0, 1)
      if (product) return 1.0 + (2.0 * unit - 1.0) / (2.0 * ranks_);
      return 2.0 * unit - 1.0;
    } else {
      const float unit = static_cast<float>(h >> 40) * 0x1p-24f;  // [0, 1), exact
      const float value = product
                              ? 1.0f + (2.0f * unit - 1.0f) / (2.0f * static_cast<float>(ranks_))
                              : 2.0f * unit - 1.0f;
      return T(value);  // half and bfloat16 round to nearest even
    }
  }

  /// True when `got` is the reduction (op) over every rank's input at `index`.
  bool reduced_ok(T got, std::size_t index) const noexcept {
    if constexpr (std::is_integral_v<T>) {
      return same_bits(got, integer_reference(index));
    } else {
      return floating_ok(got, index);
    }
  }

  /// True when `got` is bit for bit rank `rank`'s input at `index` (broadcast, all_gather, and
  /// the untouched buffers of reduce).
  bool copy_ok(T got, int rank, std::size_t index) const noexcept {
    return same_bits(got, input(rank, index));
  }

  /// True when `got` still holds the poison bytes (an output the collective must not touch).
  static bool untouched(T got) noexcept {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &got, sizeof(T));
    for (const unsigned char b : bytes)
      if (b != kPoisonByte) return false;
    return true;
  }

 private:
  static bool same_bits(T a, T b) noexcept { return std::memcmp(&a, &b, sizeof(T)) == 0; }

  static long double widen(T value) noexcept {
    if constexpr (is_half_precision_v<T>) {
      return static_cast<float>(value);
    } else {
      return static_cast<long double>(value);
    }
  }

  T integer_reference(std::size_t index) const noexcept {
    auto wide = [&](int rank) { return static_cast<std::int64_t>(input(rank, index)); };
    std::uint64_t acc = static_cast<std::uint64_t>(wide(0));
    std::int64_t extreme = wide(0);
    for (int r = 1; r < ranks_; ++r) {
      const std::int64_t x = wide(r);
      switch (op_) {
        case ReduceOp::sum:
        case ReduceOp::mean:
          acc += static_cast<std::uint64_t>(x);
          break;
        case ReduceOp::product:
          acc *= static_cast<std::uint64_t>(x);
          break;
        case ReduceOp::min:
          extreme = x < extreme ? x : extreme;
          break;
        case ReduceOp::max:
          extreme = x > extreme ? x : extreme;
          break;
      }
    }
    if (op_ == ReduceOp::min || op_ == ReduceOp::max) return static_cast<T>(extreme);
    const T wrapped = static_cast<T>(acc);  // modular since C++20
    if (op_ != ReduceOp::mean) return wrapped;
    // The wrapped sum divided with truncation toward zero (ReduceOp's documented mean).
    return static_cast<T>(static_cast<std::int64_t>(wrapped) / static_cast<std::int64_t>(ranks_));
  }

  static constexpr long double epsilon() noexcept {
    if constexpr (std::same_as<T, float16>) {
      return 0x1p-10L;
    } else if constexpr (std::same_as<T, bfloat16>) {
      return 0x1p-7L;
    } else if constexpr (std::same_as<T, float>) {
      return 0x1p-23L;
    } else {
      return 0x1p-52L;
    }
  }

  // One unit in the last place of T at `magnitude`, subnormals included.
  static long double ulp(long double magnitude) noexcept {
    constexpr int kMantissaBits = std::same_as<T, float16> ? 10 : 7;
    constexpr int kMinExponent = std::same_as<T, float16> ? -14 : -126;
    int exponent = 0;
    std::frexp(magnitude, &exponent);  // magnitude = m · 2^exponent, m in [0.5, 1)
    const int binade =
        magnitude == 0 ? kMinExponent : (exponent - 1 > kMinExponent ? exponent - 1 : kMinExponent);
    return std::ldexp(1.0L, binade - kMantissaBits);
  }

  bool floating_ok(T got, std::size_t index) const noexcept {
    const long double n = ranks_;
    long double acc = widen(input(0, index));
    long double magnitude = std::fabs(acc);
    for (int r = 1; r < ranks_; ++r) {
      const long double x = widen(input(r, index));
      switch (op_) {
        case ReduceOp::sum:
        case ReduceOp::mean:
          acc += x;
          magnitude += std::fabs(x);
          break;
        case ReduceOp::product:
          acc *= x;
          break;
        case ReduceOp::min:
          acc = x < acc ? x : acc;
          break;
        case ReduceOp::max:
          acc = x > acc ? x : acc;
          break;
      }
    }
    const long double value = widen(got);
    // min and max pick one of the inputs: exact (compared as values, so -0 equals +0).
    if (op_ == ReduceOp::min || op_ == ReduceOp::max) return value == acc;
    const long double eps = epsilon();
    long double tolerance = 0;
    switch (op_) {
      case ReduceOp::sum:
        tolerance = n * eps * magnitude;
        break;
      case ReduceOp::mean:
        acc /= n;
        tolerance = eps * magnitude + 2 * eps * std::fabs(acc);
        break;
      case ReduceOp::product:
        tolerance = 2 * n * eps * std::fabs(acc);
        break;
      case ReduceOp::min:
      case ReduceOp::max:
        break;
    }
    if constexpr (is_half_precision_v<T>) {
      tolerance += ulp(std::fabs(acc) + tolerance) + n * ulp(0) / 2;
    }
    return std::fabs(value - acc) <= tolerance;  // false for NaN
  }

  std::uint64_t seed_;
  ReduceOp op_;
  int ranks_;
};

}  // namespace strata::perf
