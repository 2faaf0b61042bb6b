// Tests for strata/ps/partitioner.hpp: TF's shard counts (the docstring examples and TF's float
// formulas over a sweep) and TF's "div" split of rows over shards.
#include <strata/ps/partitioner.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include <doctest/doctest.h>

namespace ps = strata::ps;
using Shape = std::vector<std::size_t>;

namespace {

constexpr std::size_t kFloat32 = 4;

static_assert(ps::Partitioner<ps::NoPartitioner>);
static_assert(ps::Partitioner<ps::FixedShardsPartitioner>);
static_assert(ps::Partitioner<ps::MinSizePartitioner>);
static_assert(ps::Partitioner<ps::MaxSizePartitioner>);
static_assert(!ps::Partitioner<int>);
static_assert(!ps::Partitioner<std::vector<std::size_t>>);

// Any callable of the right form is a partitioner, e.g. a user's lambda.
constexpr auto kThreeShards = [](std::span<const std::size_t>, std::size_t) { return 3; };
static_assert(ps::Partitioner<decltype(kThreeShards)>);

// The rows of each shard by dealing the rows out one at a time, row r to shard r % shards, and
// placing the shards one after another: a different computation from shard_rows's, with the
// same sizes (the first rows % shards shards get one row more).
std::vector<ps::RowRange> dealt_rows(std::size_t rows, std::size_t shards) {
  std::vector<std::size_t> sizes(shards, 0);
  for (std::size_t row = 0; row < rows; ++row)
    ++sizes[row % shards];
  std::vector<ps::RowRange> ranges;
  std::size_t offset = 0;
  for (const std::size_t size : sizes) {
    ranges.push_back(ps::RowRange{offset, size});
    offset += size;
  }
  return ranges;
}

// TF's formulas as TF evaluates them, in double (Python floats): min_max_variable_partitioner
// and variable_axis_size_partitioner in tensorflow/python/ops/partitioned_variables.py.
std::size_t tf_min_size(const Shape& shape, double element_bytes, double min_slice_size,
                        double max_partitions) {
  double num_elements = 1;
  for (const std::size_t dim : shape)
    num_elements *= static_cast<double>(dim);
  const double partitions = num_elements * element_bytes / min_slice_size;
  const double shards = std::max(
      1.0, std::min({static_cast<double>(shape[0]), max_partitions, std::ceil(partitions)}));
  return static_cast<std::size_t>(shards);
}

std::size_t tf_max_size(const Shape& shape, double element_bytes, double max_shard_bytes,
                        int max_shards) {
  double num_elements = 1;
  for (const std::size_t dim : shape)
    num_elements *= static_cast<double>(dim);
  const double rows = static_cast<double>(shape[0]);
  const double bytes_per_slice = 1.0 * (num_elements / rows) * element_bytes;
  const double slices_per_shard = std::max(1.0, std::floor(max_shard_bytes / bytes_per_slice));
  auto shards = static_cast<std::size_t>(std::ceil(1.0 * rows / slices_per_shard));
  if (max_shards != 0) shards = std::min(shards, static_cast<std::size_t>(max_shards));
  return shards;
}

}  // namespace

TEST_CASE("shard_rows gives TF's documented split") {
  // parameter_server_strategy_v2.py: "num_partitions=4, shape[0]=10, partitions: [3, 3, 2, 2]
  // offsets: [0, 3, 6, 8, 10]".
  CHECK(ps::shard_rows(10, 4) == std::vector<ps::RowRange>{{0, 3}, {3, 3}, {6, 2}, {8, 2}});
  CHECK(ps::shard_rows(10, 4).back().end() == 10);
  CHECK(ps::shard_rows(7, 1) == std::vector<ps::RowRange>{{0, 7}});
  CHECK(ps::shard_rows(3, 3) == std::vector<ps::RowRange>{{0, 1}, {1, 1}, {2, 1}});
  CHECK(ps::shard_rows(8, 4) == std::vector<ps::RowRange>{{0, 2}, {2, 2}, {4, 2}, {6, 2}});
  // A variable with no rows is one empty shard.
  CHECK(ps::shard_rows(0, 1) == std::vector<ps::RowRange>{{0, 0}});
}

TEST_CASE("shard_rows is an exact, contiguous, balanced cover, equal to dealing rows out") {
  for (std::size_t rows = 1; rows <= 70; ++rows) {
    for (std::size_t shards = 1; shards <= rows; ++shards) {
      CAPTURE(rows);
      CAPTURE(shards);
      const std::vector<ps::RowRange> ranges = ps::shard_rows(rows, shards);
      REQUIRE(ranges.size() == shards);
      CHECK(ranges == dealt_rows(rows, shards));
      std::size_t expected_offset = 0;
      for (std::size_t shard = 0; shard < shards; ++shard) {
        CHECK(ranges[shard].offset == expected_offset);
        CHECK(ranges[shard].rows >= 1);  // TF never creates an empty shard
        // Sizes never grow along the shards and differ by at most one.
        CHECK(ranges[shard].rows <= ranges.front().rows);
        CHECK(ranges[shard].rows + 1 >= ranges.front().rows);
        expected_offset = ranges[shard].end();
      }
      CHECK(expected_offset == rows);
    }
  }
  // Large row counts, where no per-row reference is cheap: the sums and offsets still add up.
  for (const std::size_t rows : {std::size_t{1} << 20, std::size_t{1000003}, std::size_t{1} << 40})
    for (const std::size_t shards : {2, 3, 7, 64, 1000}) {
      const std::vector<ps::RowRange> ranges = ps::shard_rows(rows, shards);
      std::size_t total = 0;
      for (const ps::RowRange& range : ranges) {
        CHECK(range.offset == total);
        total += range.rows;
      }
      CHECK(total == rows);
      CHECK(ranges.front().rows == rows / shards + (rows % shards != 0 ? 1 : 0));
      CHECK(ranges.back().rows == rows / shards);
    }
}

TEST_CASE("shard_rows rejects no shards and more shards than rows") {
  CHECK_THROWS_WITH_AS(ps::shard_rows(10, 0),
                       "strata: ps::shard_rows: shards is 0; pass the number of shards, at least 1 "
                       "(1 means unsharded)",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(ps::shard_rows(3, 4),
                       doctest::Contains("ps::shard_rows: 4 shards for a variable of 3 rows"),
                       strata::UsageError);
  CHECK_THROWS_AS(ps::shard_rows(0, 2), strata::UsageError);
  CHECK_THROWS_AS(ps::shard_rows(0, 0), strata::UsageError);
}

TEST_CASE("the partitioners' docstring examples (tf.distribute.experimental.partitioners)") {
  const Shape ten_by_three{10, 3}, six_by_one{6, 1};
  // FixedShardsPartitioner(num_shards=2)(TensorShape([10, 3]), tf.float32) -> [2, 1]
  CHECK(ps::FixedShardsPartitioner{2}(ten_by_three, kFloat32) == 2);
  // MinSizePartitioner(min_shard_bytes=4, max_shards=2)(TensorShape([6, 1]), tf.float32) -> [2, 1]
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 2}(six_by_one, kFloat32) == 2);
  // MinSizePartitioner(min_shard_bytes=4, max_shards=10)(...) -> [6, 1]
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(six_by_one, kFloat32) == 6);
  // MaxSizePartitioner(max_shard_bytes=4)(TensorShape([6, 1]), tf.float32) -> [6, 1]
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4}(six_by_one, kFloat32) == 6);
  // MaxSizePartitioner(max_shard_bytes=4, max_shards=2)(...) -> [2, 1]
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4, .max_shards = 2}(six_by_one, kFloat32) == 2);
  // MaxSizePartitioner(max_shard_bytes=1024)(...) -> [1, 1]
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 1024}(six_by_one, kFloat32) == 1);
  // min_max_variable_partitioner's docstring: float32 [1024, 1024] at 256 KiB per slice gives
  // 16 partitions when max_partitions >= 16, and max_partitions otherwise.
  const Shape square{1024, 1024};
  CHECK(ps::MinSizePartitioner{.max_shards = 16}(square, kFloat32) == 16);
  CHECK(ps::MinSizePartitioner{.max_shards = 100}(square, kFloat32) == 16);
  CHECK(ps::MinSizePartitioner{.max_shards = 5}(square, kFloat32) == 5);
}

TEST_CASE("partitioners clamp to rows, round as TF does, and give 1 to scalars and empty shapes") {
  const Shape scalar{}, no_rows{0, 3}, no_columns{6, 0};
  CHECK(ps::NoPartitioner{}(Shape{1000, 1000}, kFloat32) == 1);

  CHECK(ps::FixedShardsPartitioner{10}(Shape{3, 5}, kFloat32) == 3);
  CHECK(ps::FixedShardsPartitioner{4}(Shape{10}, 0) == 4);  // the element size is not used
  CHECK(ps::FixedShardsPartitioner{4}(scalar, kFloat32) == 1);
  CHECK(ps::FixedShardsPartitioner{4}(no_rows, kFloat32) == 1);

  // Defaults: 256 KiB and at most one shard, so no partitioning.
  CHECK(ps::MinSizePartitioner{}(Shape{1 << 20, 64}, kFloat32) == 1);
  // 40 bytes over 16-byte shards: ceil(2.5) = 3.
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 16, .max_shards = 10}(Shape{10, 1}, 4) == 3);
  // Never more shards than rows: 2 rows of 400 bytes.
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(Shape{2, 100}, 4) == 2);
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(scalar, 4) == 1);
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(no_rows, 4) == 1);
  CHECK(ps::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(no_columns, 4) == 1);

  // Rows of 12 bytes, 40 bytes per shard: 3 rows per shard, ceil(10 / 3) = 4 shards.
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 40}(Shape{10, 3}, kFloat32) == 4);
  // A row of 400 bytes above the 4-byte limit still makes one shard per row.
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4}(Shape{5, 100}, kFloat32) == 5);
  // One-dimensional: each row is one element.
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 64 << 20}(Shape{100'000'000}, kFloat32) == 6);
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4}(scalar, kFloat32) == 1);
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4}(no_rows, kFloat32) == 1);
  CHECK(ps::MaxSizePartitioner{.max_shard_bytes = 4}(no_columns, kFloat32) == 1);
}

TEST_CASE("integer partitioners equal TF's float formulas over a sweep") {
  const Shape shapes[] = {{1},    {2},          {6, 1},      {10, 3},   {7, 5, 3},  {97, 13},
                          {1000}, {1024, 1024}, {4096, 100}, {3, 1000}, {100003, 7}};
  const std::size_t element_sizes[] = {1, 2, 4, 8, 16};
  const std::size_t byte_limits[] = {1, 3, 4, 7, 16, 100, 1000, 4096, 65536, 256 << 10, 1 << 20};
  const int max_shards_values[] = {1, 2, 3, 10, 64, 1000};
  for (const Shape& shape : shapes)
    for (const std::size_t element_bytes : element_sizes)
      for (const std::size_t bytes : byte_limits) {
        CAPTURE(shape[0]);
        CAPTURE(shape.size());
        CAPTURE(element_bytes);
        CAPTURE(bytes);
        const auto size = static_cast<double>(element_bytes);
        const auto limit = static_cast<double>(bytes);
        CHECK(ps::MaxSizePartitioner{.max_shard_bytes = bytes}(shape, element_bytes) ==
              tf_max_size(shape, size, limit, 0));
        for (const int max_shards : max_shards_values) {
          CAPTURE(max_shards);
          CHECK(ps::MinSizePartitioner{.min_shard_bytes = bytes, .max_shards = max_shards}(
                    shape, element_bytes) == tf_min_size(shape, size, limit, max_shards));
          CHECK(ps::MaxSizePartitioner{.max_shard_bytes = bytes, .max_shards = max_shards}(
                    shape, element_bytes) == tf_max_size(shape, size, limit, max_shards));
          CHECK(ps::FixedShardsPartitioner{max_shards}(shape, element_bytes) ==
                std::min(static_cast<std::size_t>(max_shards), shape[0]));
        }
      }
}

TEST_CASE("partitioners reject TF's invalid arguments, naming the partitioner and field") {
  const Shape shape{10, 3};
  CHECK_THROWS_WITH_AS(ps::FixedShardsPartitioner{0}(shape, kFloat32),
                       "strata: ps::FixedShardsPartitioner: num_shards is 0; pass num_shards >= 1",
                       strata::UsageError);
  CHECK_THROWS_AS(ps::FixedShardsPartitioner{-2}(shape, kFloat32), strata::UsageError);

  CHECK_THROWS_WITH_AS(ps::MinSizePartitioner{.min_shard_bytes = 0}(shape, kFloat32),
                       doctest::Contains("ps::MinSizePartitioner: min_shard_bytes is 0"),
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(ps::MinSizePartitioner{.max_shards = 0}(shape, kFloat32),
                       doctest::Contains("ps::MinSizePartitioner: max_shards is 0"),
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(ps::MinSizePartitioner{}(shape, 0),
                       doctest::Contains("ps::MinSizePartitioner: element_bytes is 0"),
                       strata::UsageError);

  // max_shard_bytes is required, as in TF: left at its default it is 0.
  CHECK_THROWS_WITH_AS(ps::MaxSizePartitioner{}(shape, kFloat32),
                       doctest::Contains("ps::MaxSizePartitioner: max_shard_bytes is 0"),
                       strata::UsageError);
  const ps::MaxSizePartitioner negative_max_shards{.max_shard_bytes = 4, .max_shards = -1};
  CHECK_THROWS_WITH_AS(negative_max_shards(shape, kFloat32),
                       doctest::Contains("ps::MaxSizePartitioner: max_shards is -1"),
                       strata::UsageError);
  CHECK_THROWS_AS(ps::MaxSizePartitioner{.max_shard_bytes = 4}(shape, 0), strata::UsageError);

  // A shape whose byte size does not fit in size_t is a wrong shape.
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  CHECK_THROWS_WITH_AS(ps::MinSizePartitioner{}(Shape{huge, 3}, kFloat32),
                       doctest::Contains("overflows"), strata::UsageError);
  CHECK_THROWS_AS(ps::MaxSizePartitioner{.max_shard_bytes = 4}(Shape{2, huge, 3}, kFloat32),
                  strata::UsageError);
}

TEST_CASE("shard_variable creates the shards ParameterServerStrategy would") {
  CHECK(ps::shard_variable(ps::FixedShardsPartitioner{4}, Shape{10, 3}, kFloat32) ==
        std::vector<ps::RowRange>{{0, 3}, {3, 3}, {6, 2}, {8, 2}});
  CHECK(ps::shard_variable(ps::NoPartitioner{}, Shape{10, 3}, kFloat32) ==
        std::vector<ps::RowRange>{{0, 10}});
  // A scalar is never partitioned: one shard holding its one value.
  CHECK(ps::shard_variable(ps::FixedShardsPartitioner{4}, Shape{}, kFloat32) ==
        std::vector<ps::RowRange>{{0, 1}});
  CHECK(ps::shard_variable(ps::FixedShardsPartitioner{4}, Shape{0, 3}, kFloat32) ==
        std::vector<ps::RowRange>{{0, 0}});
  // A user-written partitioner asking for more shards than rows is clamped, as TF does.
  CHECK(ps::shard_variable(kThreeShards, Shape{2, 8}, kFloat32) ==
        std::vector<ps::RowRange>{{0, 1}, {1, 1}});
  CHECK(ps::shard_variable(ps::MaxSizePartitioner{.max_shard_bytes = 4}, Shape{6, 1}, kFloat32)
            .size() == 6);

  const auto none = [](std::span<const std::size_t>, std::size_t) { return 0; };
  const auto negative = [](std::span<const std::size_t>, std::size_t) { return -1; };
  CHECK_THROWS_WITH_AS(ps::shard_variable(none, Shape{4}, kFloat32),
                       doctest::Contains("ps::shard_variable: the partitioner returned fewer"),
                       strata::UsageError);
  CHECK_THROWS_AS(ps::shard_variable(negative, Shape{4}, kFloat32), strata::UsageError);
}
