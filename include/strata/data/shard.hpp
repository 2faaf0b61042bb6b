// strata/data/shard.hpp — sharding a dataset of N examples over workers (or replicas).
//
// Two ways to give each of `count` shards its part of the examples 0 .. N-1:
//
// - `shard` (contiguous, balanced blocks): shard k reads one range. Use it when examples are
//   stored in order in files or arrays, so that each worker reads one contiguous region, and
//   when N is known up front.
// - `shard_strided` / `shard_indices_strided` (round robin, like tf.data's
//   `Dataset.shard(num_shards, index)`): example i goes to shard i % count. Use it to match a
//   TF input pipeline example for example, when neighbouring examples are correlated (sorted
//   or grouped data: every shard then sees a spread of the whole set), or for streams, where
//   each element can be assigned without knowing N.
//
// Both give every example to exactly one shard, and shard sizes differ by at most one.
//
// Sharding a dataset is tf.distribute's *per-worker* input (auto-shard policy DATA, or FILE
// over a list of files): each worker reads and batches only its shard, so the global batches
// differ from single-replica training on the whole dataset. To see the same global batches as
// single-replica training, use `EpochSampler` (strata/data/sampler.hpp), which splits each
// global batch instead.
#pragma once

#include <compare>
#include <cstddef>
#include <iterator>
#include <ranges>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>
#include <strata/data/batch_split.hpp>

namespace strata::data {

namespace detail {

inline void check_shard(std::string_view operation, std::size_t index, std::size_t count) {
  if (count == 0)
    throw UsageError(-1, operation, "count is 0", "pass the number of shards, at least 1");
  if (index >= count)
    throw UsageError(-1, operation,
                     fmt::format("shard index {} is out of range for {} shards", index, count),
                     "pass a shard index in [0, count)");
}

}  // namespace detail

/// The contiguous block of examples that shard `index` of `count` owns: the first
/// `num_examples % count` shards get `num_examples / count + 1` examples, the others
/// `num_examples / count` (a shard is empty when there are fewer examples than shards).
/// For example 10 examples over 4 shards: [0, 3), [3, 6), [6, 8), [8, 10).
///
/// @throws UsageError ("data::shard") if `count == 0` or `index >= count`.
/// Cost: O(1). Deterministic.
inline Slice shard(std::size_t num_examples, std::size_t index, std::size_t count) {
  detail::check_shard("data::shard", index, count);
  return detail::balanced_block(num_examples, index, count);
}

/// The examples `first, first + stride, first + 2 * stride, ...` (`size` of them), as a
/// random-access, sized view that stores three numbers. Returned by `shard_strided`.
class StridedShard : public std::ranges::view_base {
 public:
  /// A random-access iterator over the example indices (a position `k` in the shard; it
  /// yields `first + k * stride`).
  class Iterator {
   public:
    using iterator_concept = std::random_access_iterator_tag;
    // For pre-C++20 algorithms only an input iterator, because `*it` is not a reference (the
    // same choice as std::ranges::iota_view).
    using iterator_category = std::input_iterator_tag;
    using value_type = std::size_t;
    using difference_type = std::ptrdiff_t;

    Iterator() = default;
    constexpr Iterator(std::size_t first, std::size_t stride, std::size_t k) noexcept
        : first_(first), stride_(stride), k_(k) {}

    constexpr std::size_t operator*() const noexcept { return first_ + k_ * stride_; }
    constexpr std::size_t operator[](difference_type n) const noexcept { return *(*this + n); }

    constexpr Iterator& operator++() noexcept { return *this += 1; }
    constexpr Iterator operator++(int) noexcept { return std::exchange(*this, *this + 1); }
    constexpr Iterator& operator--() noexcept { return *this -= 1; }
    constexpr Iterator operator--(int) noexcept { return std::exchange(*this, *this - 1); }
    constexpr Iterator& operator+=(difference_type n) noexcept {
      k_ += static_cast<std::size_t>(n);  // modular arithmetic: a negative n steps back
      return *this;
    }
    constexpr Iterator& operator-=(difference_type n) noexcept {
      k_ -= static_cast<std::size_t>(n);
      return *this;
    }

    friend constexpr Iterator operator+(Iterator it, difference_type n) noexcept { return it += n; }
    friend constexpr Iterator operator+(difference_type n, Iterator it) noexcept { return it += n; }
    friend constexpr Iterator operator-(Iterator it, difference_type n) noexcept { return it -= n; }
    friend constexpr difference_type operator-(const Iterator& a, const Iterator& b) noexcept {
      return static_cast<difference_type>(a.k_ - b.k_);
    }
    // Iterators of one shard differ only in k_; comparing others is undefined, as for any range.
    friend constexpr bool operator==(const Iterator& a, const Iterator& b) noexcept {
      return a.k_ == b.k_;
    }
    friend constexpr std::strong_ordering operator<=>(const Iterator& a,
                                                      const Iterator& b) noexcept {
      return a.k_ <=> b.k_;
    }

   private:
    std::size_t first_ = 0;
    std::size_t stride_ = 1;
    std::size_t k_ = 0;
  };

  StridedShard() = default;
  constexpr StridedShard(std::size_t first, std::size_t stride, std::size_t size) noexcept
      : first_(first), stride_(stride), size_(size) {}

  constexpr Iterator begin() const noexcept { return Iterator(first_, stride_, 0); }
  constexpr Iterator end() const noexcept { return Iterator(first_, stride_, size_); }
  constexpr std::size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  /// The `k`-th example index of this shard; requires `k < size()`.
  constexpr std::size_t operator[](std::size_t k) const noexcept { return first_ + k * stride_; }

  constexpr std::size_t first() const noexcept { return first_; }
  constexpr std::size_t stride() const noexcept { return stride_; }

 private:
  std::size_t first_ = 0;
  std::size_t stride_ = 1;
  std::size_t size_ = 0;
};

/// The examples of shard `index` of `count` in tf.data's round-robin sharding
/// (`Dataset.range(num_examples).shard(count, index)`): `index, index + count,
/// index + 2 * count, ...` below `num_examples`. The first `num_examples % count` shards get
/// one example more than the others. Returns a view; nothing is allocated.
///
/// @throws UsageError ("data::shard_strided") if `count == 0` or `index >= count`.
/// Cost: O(1); iterating is O(1) per element. Deterministic.
///
/// Example:
///
///     for (std::size_t i : strata::data::shard_strided(n, worker, num_workers)) read(i);
inline StridedShard shard_strided(std::size_t num_examples, std::size_t index, std::size_t count) {
  detail::check_shard("data::shard_strided", index, count);
  // ceil((num_examples - index) / count) without overflow.
  const std::size_t size = index < num_examples ? (num_examples - index - 1) / count + 1 : 0;
  return StridedShard(index, count, size);
}

/// `shard_strided` materialized into a vector (for APIs that want a container).
/// @throws UsageError ("data::shard_strided") as `shard_strided`.
/// Cost: O(num_examples / count) time and memory.
inline std::vector<std::size_t> shard_indices_strided(std::size_t num_examples, std::size_t index,
                                                      std::size_t count) {
  const StridedShard view = shard_strided(num_examples, index, count);
  std::vector<std::size_t> indices;
  indices.reserve(view.size());
  for (const std::size_t i : view)
    indices.push_back(i);
  return indices;
}

}  // namespace strata::data
