// strata/fusion/bucket_plan.hpp: one element type per bucket, the caps (a smaller first bucket,
// a gradient larger than the cap alone), empty gradients, the order buckets start in, and the
// invariants every plan keeps, on fixed and random gradient lists.
#include <strata/fusion/bucket_plan.hpp>

#include <cstddef>
#include <random>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::DataType;
using strata::fusion::BucketOptions;
using strata::fusion::BucketPlan;
using strata::fusion::GradientSpec;

std::vector<std::size_t> gradients_of(const strata::fusion::Bucket& bucket) {
  std::vector<std::size_t> out;
  for (const auto& slot : bucket.slots)
    out.push_back(slot.gradient);
  return out;
}

// What every plan must satisfy, whatever the list and caps.
void check_invariants(const std::vector<GradientSpec>& list, const BucketPlan& plan) {
  const BucketOptions& options = plan.options();
  std::vector<int> seen(list.size(), 0);
  std::vector<int> buckets_of_type(8, 0);
  for (std::size_t b = 0; b < plan.buckets().size(); ++b) {
    const auto& bucket = plan.buckets()[b];
    REQUIRE_FALSE(bucket.slots.empty());
    std::size_t offset = 0;
    std::size_t nonzero = 0;
    for (std::size_t s = 0; s < bucket.slots.size(); ++s) {
      const auto& slot = bucket.slots[s];
      REQUIRE(slot.gradient < list.size());
      CHECK(list[slot.gradient].type == bucket.type);
      CHECK(slot.count == list[slot.gradient].count);
      CHECK(slot.offset == offset);  // packed, in list order
      if (s > 0) CHECK(bucket.slots[s - 1].gradient < slot.gradient);
      offset += slot.count;
      nonzero += slot.count > 0 ? 1 : 0;
      ++seen[slot.gradient];
      CHECK(plan.bucket_of(slot.gradient) == b);
      CHECK(&plan.slot_of(slot.gradient) == &slot);
    }
    CHECK(bucket.count == offset);
    const bool first_of_type = buckets_of_type[static_cast<std::size_t>(bucket.type)]++ == 0;
    const std::size_t cap = first_of_type ? options.first_bucket_bytes : options.bucket_bytes;
    // Only a bucket whose one gradient is larger than the cap may exceed it.
    if (nonzero > 1) CHECK(bucket.bytes() <= cap);
  }
  for (std::size_t i = 0; i < list.size(); ++i)
    CHECK(seen[i] == 1);
}

TEST_CASE("no gradients, no buckets") {
  const std::vector<GradientSpec> none;
  const BucketPlan plan(none, {});
  CHECK(plan.buckets().empty());
  CHECK(plan.gradients() == 0);
}

TEST_CASE("a smaller first bucket, then full buckets, and the rest last") {
  // float32: 4 bytes. First cap 40 bytes (10 floats), then 100 bytes (25 floats).
  const BucketOptions options{.bucket_bytes = 100, .first_bucket_bytes = 40};
  const std::vector<GradientSpec> list{{DataType::float32, 6}, {DataType::float32, 4},
                                       {DataType::float32, 3}, {DataType::float32, 20},
                                       {DataType::float32, 5}, {DataType::float32, 1}};
  const BucketPlan plan(list, options);
  check_invariants(list, plan);
  REQUIRE(plan.buckets().size() == 3);
  CHECK(gradients_of(plan.buckets()[0]) == std::vector<std::size_t>{0, 1});  // 40 bytes: full
  CHECK(gradients_of(plan.buckets()[1]) == std::vector<std::size_t>{2, 3});  // 92; +5 would pass
  CHECK(gradients_of(plan.buckets()[2]) == std::vector<std::size_t>{4, 5});  // still open
  CHECK(plan.buckets()[1].count == 23);
  CHECK(plan.slot_of(3).offset == 3);
}

TEST_CASE("a gradient larger than the cap gets a bucket of its own") {
  const BucketOptions options{.bucket_bytes = 64, .first_bucket_bytes = 64};
  const std::vector<GradientSpec> list{
      {DataType::float64, 2}, {DataType::float64, 100}, {DataType::float64, 3}};
  const BucketPlan plan(list, options);
  check_invariants(list, plan);
  REQUIRE(plan.buckets().size() == 3);
  CHECK(gradients_of(plan.buckets()[0]) == std::vector<std::size_t>{0});
  CHECK(gradients_of(plan.buckets()[1]) == std::vector<std::size_t>{1});
  CHECK(plan.buckets()[1].bytes() == 800);
  CHECK(gradients_of(plan.buckets()[2]) == std::vector<std::size_t>{2});
}

TEST_CASE("one element type per bucket; empty gradients ride along") {
  const BucketOptions options{.bucket_bytes = 1 << 20, .first_bucket_bytes = 1 << 20};
  const std::vector<GradientSpec> list{{DataType::float32, 3},  {DataType::bfloat16, 0},
                                       {DataType::int64, 2},    {DataType::float32, 0},
                                       {DataType::bfloat16, 7}, {DataType::float32, 5}};
  const BucketPlan plan(list, options);
  check_invariants(list, plan);
  // Nothing fills a bucket: three open buckets, by their first gradient.
  REQUIRE(plan.buckets().size() == 3);
  CHECK(plan.buckets()[0].type == DataType::float32);
  CHECK(gradients_of(plan.buckets()[0]) == std::vector<std::size_t>{0, 3, 5});
  CHECK(plan.buckets()[1].type == DataType::bfloat16);
  CHECK(gradients_of(plan.buckets()[1]) == std::vector<std::size_t>{1, 4});
  CHECK(plan.buckets()[2].type == DataType::int64);
  CHECK(plan.slot_of(5).offset == 3);
  CHECK(plan.slot_of(3).count == 0);
}

TEST_CASE("only empty gradients: one bucket of nothing per type") {
  const std::vector<GradientSpec> list{{DataType::float32, 0}, {DataType::int8, 0}};
  const BucketPlan plan(list, {});
  check_invariants(list, plan);
  CHECK(plan.buckets().size() == 2);
  CHECK(plan.buckets()[0].count == 0);
}

TEST_CASE("random lists keep every invariant, and equal lists give equal plans") {
  std::mt19937_64 random(20261127);
  const DataType types[] = {DataType::float32, DataType::float64, DataType::bfloat16,
                            DataType::float16, DataType::int32,   DataType::int8};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<GradientSpec> list(random() % 40);
    for (auto& spec : list) {
      spec.type = types[random() % (trial % 3 == 0 ? 1 : 6)];
      const std::size_t shape = random() % 10;
      spec.count = shape == 0 ? 0 : shape < 3 ? 1 : random() % (shape < 8 ? 50 : 5000);
    }
    const BucketOptions options{.bucket_bytes = 1 + random() % 4000,
                                .first_bucket_bytes = 1 + random() % 1000};
    const BucketPlan plan(list, options);
    check_invariants(list, plan);
    const BucketPlan again(list, options);
    REQUIRE(again.buckets().size() == plan.buckets().size());
    for (std::size_t b = 0; b < plan.buckets().size(); ++b) {
      CHECK(gradients_of(again.buckets()[b]) == gradients_of(plan.buckets()[b]));
    }
  }
}

}  // namespace
