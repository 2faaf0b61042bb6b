// collective_reference/inputs.hpp — what every rank contributes to a checked collective: a value
// per (seed, element type, rank, index), reproducible on any rank without communication.
//
// A value is a bijective 64-bit mix of those four, shaped by the op:
//   integers   the whole range of the type: sums and products wrap (modular arithmetic, as
//              strata's do); products use odd values so that they never collapse to 0;
//   floating   uniform in [-1, 1) on a grid of 2^-23 (2^-52 for double), rounded to nearest for
//              float16 and bfloat16; products take 1 ± 1/(2n) for n ranks, so that the product
//              of all n stays within [0.6, 1.7] and neither overflows nor underflows at any n.
// The seed tells calls apart: a stale output of an earlier call is wrong for the next one.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::reference {

/// splitmix64's finalizer: a bijection on 64-bit values with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// The inputs of one checked call: rank `rank`'s value at `index` is `inputs(rank, index)`.
template <Element T>
class Inputs {
 public:
  /// `op` selects the range (products need values near 1, or odd integers); `ranks` (at least 1)
  /// is the group size, which sets how near; `seed` tells calls apart.
  constexpr Inputs(ReduceOp op, int ranks, std::uint64_t seed = 0) noexcept
      : seed_(mix64(seed ^ (static_cast<std::uint64_t>(data_type_of<T>) << 56))),
        op_(op),
        ranks_(ranks) {}

  constexpr ReduceOp op() const noexcept { return op_; }
  constexpr int ranks() const noexcept { return ranks_; }

  [[gnu::always_inline]] T operator()(int rank, std::size_t index) const noexcept {
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
      return T(value);  // float16 and bfloat16 round to nearest even
    }
  }

 private:
  std::uint64_t seed_;
  ReduceOp op_;
  int ranks_;
};

/// Rank `rank`'s input at `index` in a group of `ranks` (one value of `Inputs`).
template <Element T>
[[gnu::always_inline]] inline T input_value(int rank, std::size_t index, ReduceOp op, int ranks,
                                            std::uint64_t seed = 0) noexcept {
  return Inputs<T>(op, ranks, seed)(rank, index);
}

}  // namespace strata::reference
