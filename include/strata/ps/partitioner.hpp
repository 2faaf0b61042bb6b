// strata/ps/partitioner.hpp — how many shards a variable is split into, and which rows each holds.
//
// The rules are TensorFlow's, so that a model sharded by strata has the shards a
// ParameterServerStrategy would give it (and checkpoints line up):
//
// - a partitioner decides the number of shards along the first dimension from the shape and
//   the element size (tf.distribute.experimental.partitioners: FixedShardsPartitioner,
//   MinSizePartitioner, MaxSizePartitioner, in tensorflow/python/distribute/sharded_variable.py,
//   whose sizes come from min_max_variable_partitioner and variable_axis_size_partitioner in
//   tensorflow/python/ops/partitioned_variables.py);
// - `shard_rows` splits the rows over that many shards ("div" partitioning, as
//   ParameterServerStrategyExtended._create_variable in
//   tensorflow/python/distribute/parameter_server_strategy_v2.py does it).
//
// Only the first dimension is ever split, as in TF2: TF's partitioners return a list with 1 for
// every other axis; ours return that first entry only.
//
// Arithmetic: TF computes sizes with Python floats. Here they are exact integers, which give
// the same result as TF's floats whenever the byte counts involved are below 2^53 (8 PiB), where
// every quotient of two such integers rounds to the same side of each whole number.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::ps {

/// The rows `[offset, offset + rows)` of a variable (along its first dimension) that one shard
/// holds.
struct RowRange {
  std::size_t offset = 0;
  std::size_t rows = 0;

  constexpr std::size_t end() const noexcept { return offset + rows; }
  friend constexpr bool operator==(const RowRange&, const RowRange&) = default;
};

/// The rows of each of `shards` shards of a variable with `rows` rows, in shard order: TF's
/// ShardedVariable rule, `rows / shards` rows each and one more for the first
/// `rows % shards` shards. For example 10 rows over 4 shards: 3, 3, 2, 2 rows at offsets
/// 0, 3, 6, 8. (The same balanced split as data::split_batch, but here no shard may be empty.)
///
/// A variable with no rows has exactly one, empty, shard: `shard_rows(0, 1) == {{0, 0}}`.
///
/// @throws UsageError ("ps::shard_rows") if `shards == 0`, or if there are more shards than
///         rows (more than 1 when `rows == 0`): TF never creates an empty shard.
/// Cost: O(shards). Deterministic and identical on every task.
inline std::vector<RowRange> shard_rows(std::size_t rows, std::size_t shards) {
  if (shards == 0)
    throw UsageError(-1, "ps::shard_rows", "shards is 0",
                     "pass the number of shards, at least 1 (1 means unsharded)");
  if (shards > (rows == 0 ? 1 : rows))
    throw UsageError(-1, "ps::shard_rows",
                     fmt::format("{} shards for a variable of {} rows", shards, rows),
                     "pass at most one shard per row (partitioners clamp their result to the "
                     "rows; shard_variable does this for you)");
  const std::size_t base = rows / shards;
  const std::size_t extra = rows % shards;
  std::vector<RowRange> ranges;
  ranges.reserve(shards);
  std::size_t offset = 0;
  for (std::size_t shard = 0; shard < shards; ++shard) {
    const std::size_t size = base + (shard < extra ? 1 : 0);
    ranges.push_back(RowRange{offset, size});
    offset += size;
  }
  return ranges;
}

/// A rule for the number of shards of a variable along its first dimension, given the
/// variable's shape and the bytes of one element (for strings, TF uses an estimate,
/// `bytes_per_string`, 16 by default: pass that). The result is at least 1; the partitioners
/// here also never return more shards than rows, but `shard_variable` clamps it in case a
/// user-written one does (as TF does).
template <class P>
concept Partitioner = std::invocable<const P&, std::span<const std::size_t>, std::size_t> &&
    std::convertible_to<std::invoke_result_t<const P&, std::span<const std::size_t>, std::size_t>,
                        std::size_t>;

namespace detail {

// a * b, or a UsageError naming `operation` if it does not fit in size_t: a variable that large
// is a bug in the caller (a wrong shape), not something a parameter server could hold.
inline std::size_t checked_multiply(std::size_t a, std::size_t b, std::string_view operation) {
  if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a)
    throw UsageError(-1, operation, "the variable's size in bytes overflows std::size_t",
                     "pass the variable's real shape and element size");
  return a * b;
}

// The bytes of one row (one index of the first dimension): the product of the other dimensions
// times the element size. A scalar's one value counts as one row.
inline std::size_t row_bytes(std::span<const std::size_t> shape, std::size_t element_bytes,
                             std::string_view operation) {
  std::size_t bytes = element_bytes;
  for (std::size_t axis = 1; axis < shape.size(); ++axis)
    bytes = checked_multiply(bytes, shape[axis], operation);
  return bytes;
}

inline void check_element_bytes(std::size_t element_bytes, std::string_view operation) {
  if (element_bytes == 0)
    throw UsageError(-1, operation, "element_bytes is 0",
                     "pass the size of one element in bytes (for strings, an estimate such as "
                     "TF's bytes_per_string, 16)");
}

inline void check_positive(int value, std::string_view operation, std::string_view field) {
  if (value < 1)
    throw UsageError(-1, operation, fmt::format("{} is {}", field, value),
                     fmt::format("pass {} >= 1", field));
}

constexpr std::size_t ceil_div(std::size_t numerator, std::size_t denominator) noexcept {
  return numerator / denominator + (numerator % denominator != 0 ? 1 : 0);
}

}  // namespace detail

/// No partitioning: every variable is one shard (TF's ParameterServerStrategy without a
/// `variable_partitioner`).
struct NoPartitioner {
  std::size_t operator()(std::span<const std::size_t> /*shape*/,
                         std::size_t /*element_bytes*/) const noexcept {
    return 1;
  }
};

/// A fixed number of shards, `min(num_shards, shape[0])`
/// (tf.distribute.experimental.partitioners.FixedShardsPartitioner). A scalar, or a variable
/// with no rows, gets 1 shard (TF skips partitioning scalars, and rejects the 0 that
/// `min(num_shards, 0)` would give). The element size is not used.
///
/// @throws UsageError ("ps::FixedShardsPartitioner") if `num_shards < 1` (TF rejects the
///         resulting 0 shards when it creates the variable).
struct FixedShardsPartitioner {
  int num_shards = 1;

  std::size_t operator()(std::span<const std::size_t> shape, std::size_t /*element_bytes*/) const {
    detail::check_positive(num_shards, "ps::FixedShardsPartitioner", "num_shards");
    if (shape.empty() || shape[0] == 0) return 1;
    return std::min(static_cast<std::size_t>(num_shards), shape[0]);
  }
};

/// As many shards as possible while each holds at least `min_shard_bytes` (except when the
/// whole variable is smaller), at most `max_shards` and at most one per row:
/// `max(1, min(shape[0], max_shards, ceil(total_bytes / min_shard_bytes)))`
/// (tf.distribute.experimental.partitioners.MinSizePartitioner, which calls
/// min_max_variable_partitioner). A scalar, or a variable with no rows or no elements, gets 1.
///
/// The fields are public so that designated initializers read like TF's keyword arguments,
/// `MinSizePartitioner{.min_shard_bytes = 4 << 20, .max_shards = 8}`; they are checked at each
/// call.
///
/// @throws UsageError ("ps::MinSizePartitioner") if `min_shard_bytes` is 0, `max_shards < 1`
///         (TF's ValueErrors), `element_bytes` is 0, or the byte size overflows std::size_t.
struct MinSizePartitioner {
  std::size_t min_shard_bytes = 256 << 10;  // TF's default, 256 KiB
  int max_shards = 1;                       // TF's default: no partitioning unless raised

  std::size_t operator()(std::span<const std::size_t> shape, std::size_t element_bytes) const {
    constexpr std::string_view kOperation = "ps::MinSizePartitioner";
    if (min_shard_bytes == 0)
      throw UsageError(-1, kOperation, "min_shard_bytes is 0", "pass min_shard_bytes >= 1");
    detail::check_positive(max_shards, kOperation, "max_shards");
    detail::check_element_bytes(element_bytes, kOperation);
    if (shape.empty() || shape[0] == 0) return 1;
    const std::size_t total_bytes = detail::checked_multiply(
        detail::row_bytes(shape, element_bytes, kOperation), shape[0], kOperation);
    const std::size_t by_size = detail::ceil_div(total_bytes, min_shard_bytes);
    return std::max<std::size_t>(
        1, std::min({shape[0], static_cast<std::size_t>(max_shards), by_size}));
  }
};

/// As few shards as possible while each holds at most `max_shard_bytes`, splitting only
/// between rows (tf.distribute.experimental.partitioners.MaxSizePartitioner, which calls
/// variable_axis_size_partitioner):
///
///     bytes_per_slice  = (num_elements / shape[0]) * element_bytes   // one row
///     slices_per_shard = max(1, floor(max_shard_bytes / bytes_per_slice))
///     shards           = ceil(shape[0] / slices_per_shard), then min(shards, max_shards)
///
/// A row larger than `max_shard_bytes` still makes one shard (only rows are split), and hitting
/// `max_shards` makes shards larger than `max_shard_bytes`: `max_shards` takes precedence. A
/// scalar, or a variable with no rows or no elements (where TF divides by zero), gets 1.
///
/// The fields are public and checked at each call, as for MinSizePartitioner.
///
/// @throws UsageError ("ps::MaxSizePartitioner") if `max_shard_bytes` is 0 (also when left
///         unset), `max_shards < 0` (TF's ValueErrors; 0 is TF's None, no limit), `element_bytes`
///         is 0, or a row's byte size overflows std::size_t.
struct MaxSizePartitioner {
  std::size_t max_shard_bytes = 0;  // required, as in TF; e.g. (64 << 20) - 1
  int max_shards = 0;               // 0: no limit (TF's None)

  std::size_t operator()(std::span<const std::size_t> shape, std::size_t element_bytes) const {
    constexpr std::string_view kOperation = "ps::MaxSizePartitioner";
    if (max_shard_bytes == 0)
      throw UsageError(-1, kOperation, "max_shard_bytes is 0",
                       "pass max_shard_bytes >= 1, the largest shard wanted in bytes");
    if (max_shards < 0)
      throw UsageError(-1, kOperation, fmt::format("max_shards is {}", max_shards),
                       "pass max_shards >= 1, or 0 for no limit");
    detail::check_element_bytes(element_bytes, kOperation);
    if (shape.empty() || shape[0] == 0) return 1;
    const std::size_t bytes_per_slice = detail::row_bytes(shape, element_bytes, kOperation);
    if (bytes_per_slice == 0) return 1;
    const std::size_t slices_per_shard =
        std::max<std::size_t>(1, max_shard_bytes / bytes_per_slice);
    const std::size_t shards = detail::ceil_div(shape[0], slices_per_shard);
    return max_shards == 0 ? shards : std::min(shards, static_cast<std::size_t>(max_shards));
  }
};

/// The shards of a variable of `shape` (elements of `element_bytes` each) under `partitioner`,
/// as ParameterServerStrategy creates them: a scalar is never partitioned (one shard, counted as
/// one row, `{0, 1}`); otherwise the partitioner's count, clamped to the rows, goes to
/// `shard_rows`. A variable with no rows is one empty shard.
///
/// @throws UsageError ("ps::shard_variable") if the partitioner returns less than 1 (TF's
///         ValueError), and whatever the partitioner throws.
template <Partitioner P>
std::vector<RowRange> shard_variable(const P& partitioner, std::span<const std::size_t> shape,
                                     std::size_t element_bytes) {
  using Count = std::invoke_result_t<const P&, std::span<const std::size_t>, std::size_t>;
  if (shape.empty()) return {RowRange{0, 1}};
  const Count count = partitioner(shape, element_bytes);
  // A signed count below 1 would convert to a huge size_t and pass the clamp unnoticed.
  bool no_shards = false;
  if constexpr (std::is_signed_v<Count>)
    no_shards = count < 1;
  else
    no_shards = static_cast<std::size_t>(count) == 0;
  if (no_shards)
    throw UsageError(-1, "ps::shard_variable", "the partitioner returned fewer than 1 shard",
                     "return at least 1 from the partitioner (1 means unsharded)");
  const auto shards = static_cast<std::size_t>(count);
  return shard_rows(shape[0], shape[0] == 0 ? 1 : std::min(shards, shape[0]));
}

}  // namespace strata::ps
