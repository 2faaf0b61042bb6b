// benchmarks/perf/check.hpp — strata-perf's data check: the inputs of one checked call and the
// verdict on each output element, both from the one collective reference that the test suite
// checks strata with (tools/reference/collective_reference/: its inputs, its reference values
// and its tolerances, stated in reference.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <collective_reference/elements.hpp>
#include <collective_reference/inputs.hpp>
#include <collective_reference/reference.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

/// The byte outputs are filled with before a checked call: all ones is NaN for every floating
/// type and -1 (or the maximum) for integers, so an output the collective never wrote is wrong.
inline constexpr unsigned char kPoisonByte = 0xff;

/// Inputs and reference of one checked call of a collective with element type T.
template <Element T>
class DataCheck {
 public:
  /// `seed` tells checks apart (a stale output of an earlier call is wrong for this one);
  /// `ranks` is the group size.
  DataCheck(std::uint64_t seed, ReduceOp op, int ranks) noexcept : inputs_(op, ranks, seed) {}

  ReduceOp op() const noexcept { return inputs_.op(); }
  int ranks() const noexcept { return inputs_.ranks(); }

  /// Rank `rank`'s input at `index`.
  T input(int rank, std::size_t index) const noexcept { return inputs_(rank, index); }

  /// True when `got` is the reduction (op) over every rank's input at `index`.
  bool reduced_ok(T got, std::size_t index) const noexcept {
    const auto expected = reference::expected_reduction<T>(
        op(), ranks(), [&](int rank) { return inputs_(rank, index); });
    return reference::matches(got, expected);
  }

  /// True when `got` is bit for bit rank `rank`'s input at `index` (broadcast, all_gather, and
  /// the untouched buffers of reduce).
  bool copy_ok(T got, int rank, std::size_t index) const noexcept {
    return reference::same_bits(got, input(rank, index));
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
  reference::Inputs<T> inputs_;
};

}  // namespace strata::perf
