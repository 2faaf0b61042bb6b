// strata/data/batch_split.hpp — splitting one global batch over the replicas in sync.
#pragma once

#include <cstddef>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::data {

/// A contiguous range `[offset, offset + size)` of positions (in a global batch, or of
/// examples in a dataset).
struct Slice {
  std::size_t offset = 0;
  std::size_t size = 0;

  constexpr std::size_t end() const noexcept { return offset + size; }
  friend constexpr bool operator==(const Slice&, const Slice&) = default;
};

namespace detail {

// Block `index` of `count` balanced contiguous blocks of `total` positions: the first
// `total % count` blocks have one extra element. Requires index < count.
constexpr Slice balanced_block(std::size_t total, std::size_t index, std::size_t count) noexcept {
  const std::size_t base = total / count;
  const std::size_t extra = total % count;
  // index * base cannot overflow: it is at most total. Blocks before this one that got an
  // extra element: min(index, extra).
  return Slice{index * base + (index < extra ? index : extra), base + (index < extra ? 1 : 0)};
}

}  // namespace detail

/// The part of a global batch of `global_batch` examples that replica `replica` of
/// `num_replicas` computes on, in tf.distribute's sense: every step, all replicas together
/// process exactly one global batch.
///
/// The split is contiguous and in replica order (replica 0 takes the first positions), and
/// balanced: each replica gets `global_batch / num_replicas` examples and the first
/// `global_batch % num_replicas` replicas get one more. For example 10 over 4 replicas gives
/// sizes 3, 3, 2, 2 at offsets 0, 3, 6, 8; 2 over 4 gives 1, 1, 0, 0 (a replica may get an
/// empty slice, e.g. for the partial last batch of an epoch; it must still take part in the
/// step's collectives, contributing zero gradients).
///
/// Gradient aggregation with uneven slices: if every replica averages the loss over its own
/// slice and the gradients are then combined with `ReduceOp::mean`, examples on smaller slices
/// weigh more (with 3, 3, 2, 2 an example on replica 3 counts 3/2 as much as one on replica 0)
/// and the result is not the single-replica gradient of the global batch. For exact
/// equivalence, scale each replica's loss sum by `1 / global_batch` (not by its slice size)
/// and combine with `ReduceOp::sum` (what TF's `tf.nn.compute_average_loss` with
/// `global_batch_size` does). With even slices both give the same result up to rounding.
///
/// @throws UsageError ("data::split_batch") if `num_replicas == 0` or
///         `replica >= num_replicas`.
/// Cost: O(1). Deterministic and identical on every rank.
///
/// Example:
///
///     const auto [offset, size] = strata::data::split_batch(global_batch, replica, replicas);
///     // this replica's examples are batch[offset, offset + size)
inline Slice split_batch(std::size_t global_batch, std::size_t replica, std::size_t num_replicas) {
  if (num_replicas == 0)
    throw UsageError(-1, "data::split_batch", "num_replicas is 0",
                     "pass the number of replicas in sync, at least 1");
  if (replica >= num_replicas)
    throw UsageError(
        -1, "data::split_batch",
        fmt::format("replica {} is out of range for {} replicas", replica, num_replicas),
        "pass a replica index in [0, num_replicas)");
  return detail::balanced_block(global_batch, replica, num_replicas);
}

}  // namespace strata::data
