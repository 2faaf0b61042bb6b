// strata/fusion/bucket_plan.hpp — which gradients are all-reduced together.
//
// A model's gradients, in the order backward produces them (the reverse of the parameters' order
// for a feed-forward network), are grouped into buckets of one element type each, as PyTorch
// DDP does: a bucket closes when the next gradient of its type would take it past its cap, and
// the first bucket of each type has a smaller cap so that communication starts early in the
// backward pass. A gradient larger than the cap gets a bucket of its own. The plan is a pure
// function of the gradient list and the options, so every rank that registers the same list
// computes the same buckets in the same order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include <strata/core/data_type.hpp>

namespace strata::fusion {

/// One gradient as the plan sees it: its element type and its number of elements.
struct GradientSpec {
  DataType type = DataType::float32;
  std::size_t count = 0;

  friend bool operator==(const GradientSpec&, const GradientSpec&) = default;
};

/// How float32 gradients travel: as they are, or rounded to a 16-bit float for the all-reduce
/// (half the bytes; Horovod's Compression.fp16, DDP's fp16/bf16 compression hooks). The
/// reduction combines the 16-bit values in float; the result, widened back to float32, is the
/// same on every rank. Other element types travel as they are.
enum class Compression : std::uint8_t { none, float16, bfloat16 };

/// The caps of the buckets, in bytes of the gradients' own type (DDP's defaults: 25 MiB
/// buckets, 1 MiB first), and the compression of float32 buckets.
struct BucketOptions {
  std::size_t bucket_bytes = std::size_t{25} << 20;
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  Compression compression = Compression::none;
};

/// Where gradient `gradient` lies in its bucket: `count` elements from element `offset`.
struct BucketSlot {
  std::size_t gradient = 0;
  std::size_t offset = 0;
  std::size_t count = 0;
};

/// Gradients of one element type that are all-reduced as one span of `count` elements.
struct Bucket {
  DataType type = DataType::float32;
  std::size_t count = 0;
  std::vector<BucketSlot> slots;

  std::size_t bytes() const noexcept { return count * size_of(type); }
};

/// The buckets of a gradient list, in the order they are all-reduced: the order in which they
/// close as gradients arrive in list order, then the buckets still open, by their first
/// gradient. A bucket's slots are in list order.
class BucketPlan {
 public:
  BucketPlan() = default;
  BucketPlan(std::span<const GradientSpec> gradients, BucketOptions options)
      : options_(options), location_(gradients.size()) {
    struct Open {
      Bucket bucket;
      bool first = true;  // the first bucket of this type: the smaller cap
    };
    std::map<DataType, Open> open;
    std::vector<Bucket> closed;
    const auto cap = [&](const Open& state) {
      return state.first ? options.first_bucket_bytes : options.bucket_bytes;
    };
    const auto close = [&](Open& state) {
      closed.push_back(std::move(state.bucket));
      state.bucket = Bucket{};
      state.first = false;
    };
    for (std::size_t i = 0; i < gradients.size(); ++i) {
      const GradientSpec& gradient = gradients[i];
      Open& state = open[gradient.type];
      const std::size_t bytes = gradient.count * size_of(gradient.type);
      if (!state.bucket.slots.empty() && state.bucket.bytes() + bytes > cap(state)) close(state);
      state.bucket.type = gradient.type;
      state.bucket.slots.push_back({i, state.bucket.count, gradient.count});
      state.bucket.count += gradient.count;
      if (state.bucket.bytes() > 0 && state.bucket.bytes() >= cap(state)) close(state);
    }
    // The buckets still open, in the order of their first gradient.
    std::vector<Bucket> rest;
    for (auto& [type, state] : open) {
      if (!state.bucket.slots.empty()) rest.push_back(std::move(state.bucket));
    }
    std::sort(rest.begin(), rest.end(), [](const Bucket& a, const Bucket& b) {
      return a.slots.front().gradient < b.slots.front().gradient;
    });
    buckets_ = std::move(closed);
    for (Bucket& bucket : rest)
      buckets_.push_back(std::move(bucket));
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      for (std::size_t s = 0; s < buckets_[b].slots.size(); ++s) {
        location_[buckets_[b].slots[s].gradient] = {b, s};
      }
    }
  }

  const std::vector<Bucket>& buckets() const noexcept { return buckets_; }
  const BucketOptions& options() const noexcept { return options_; }
  std::size_t gradients() const noexcept { return location_.size(); }
  /// The bucket that holds gradient `i`.
  std::size_t bucket_of(std::size_t i) const { return location_.at(i).bucket; }
  /// Gradient `i`'s place in its bucket.
  const BucketSlot& slot_of(std::size_t i) const {
    const Location& at = location_.at(i);
    return buckets_[at.bucket].slots[at.slot];
  }

 private:
  struct Location {
    std::size_t bucket = 0;
    std::size_t slot = 0;
  };
  BucketOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<Location> location_;
};

}  // namespace strata::fusion
