// Tests for strata/data/shard.hpp: contiguous and strided (tf.data) sharding.
#include <strata/data/shard.hpp>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <ranges>
#include <vector>

#include <doctest/doctest.h>

namespace data = strata::data;

static_assert(std::ranges::random_access_range<data::StridedShard>);
static_assert(std::ranges::sized_range<data::StridedShard>);
static_assert(std::ranges::view<data::StridedShard>);
static_assert(std::random_access_iterator<data::StridedShard::Iterator>);
static_assert(std::ranges::common_range<data::StridedShard>);

namespace {

const std::size_t kExamples[] = {0, 1, 2, 3, 7, 10, 11, 64, 97, 100, 1000, 1031};
const std::size_t kCounts[] = {1, 2, 3, 4, 5, 8, 13, 16, 101, 2000};

}  // namespace

TEST_CASE("shard: contiguous balanced blocks") {
  CHECK(data::shard(10, 0, 4) == data::Slice{0, 3});
  CHECK(data::shard(10, 1, 4) == data::Slice{3, 3});
  CHECK(data::shard(10, 2, 4) == data::Slice{6, 2});
  CHECK(data::shard(10, 3, 4) == data::Slice{8, 2});
  CHECK(data::shard(3, 4, 5) == data::Slice{3, 0});
}

TEST_CASE("shard is an exact cover with sizes differing by at most one") {
  for (const std::size_t n : kExamples) {
    for (const std::size_t count : kCounts) {
      CAPTURE(n);
      CAPTURE(count);
      std::vector<int> seen(n, 0);
      std::size_t next = 0;
      for (std::size_t k = 0; k < count; ++k) {
        const data::Slice s = data::shard(n, k, count);
        CHECK(s.offset == next);
        CHECK((s.size == n / count || s.size == n / count + 1));
        for (std::size_t i = s.offset; i < s.end(); ++i)
          ++seen[i];
        next = s.end();
      }
      CHECK(next == n);
      CHECK(std::ranges::all_of(seen, [](int c) { return c == 1; }));
    }
  }
}

TEST_CASE("shard_strided matches tf.data's Dataset.range(n).shard(count, index)") {
  // tf.data.Dataset.range(10).shard(num_shards=3, index=1) -> [1, 4, 7]
  CHECK(data::shard_indices_strided(10, 1, 3) == std::vector<std::size_t>{1, 4, 7});
  CHECK(data::shard_indices_strided(10, 0, 3) == std::vector<std::size_t>{0, 3, 6, 9});
  CHECK(data::shard_indices_strided(10, 2, 3) == std::vector<std::size_t>{2, 5, 8});
  CHECK(data::shard_indices_strided(2, 3, 5).empty());
  CHECK(data::shard_indices_strided(0, 0, 1).empty());
}

TEST_CASE("shard_strided is an exact cover: example i goes to shard i % count") {
  for (const std::size_t n : kExamples) {
    for (const std::size_t count : kCounts) {
      CAPTURE(n);
      CAPTURE(count);
      std::vector<int> seen(n, 0);
      for (std::size_t k = 0; k < count; ++k) {
        const data::StridedShard view = data::shard_strided(n, k, count);
        const std::vector<std::size_t> vec = data::shard_indices_strided(n, k, count);
        CHECK(view.size() == vec.size());
        CHECK(std::ranges::equal(view, vec));
        CHECK((view.size() == n / count || view.size() == n / count + 1));
        CHECK(view.size() == n / count + (k < n % count ? 1 : 0));
        for (const std::size_t i : view) {
          REQUIRE(i < n);
          CHECK(i % count == k);
          ++seen[i];
        }
      }
      CHECK(std::ranges::all_of(seen, [](int c) { return c == 1; }));
    }
  }
}

TEST_CASE("StridedShard behaves as a random-access view") {
  const data::StridedShard view = data::shard_strided(20, 2, 6);  // 2, 8, 14
  REQUIRE(view.size() == 3);
  CHECK(view[0] == 2);
  CHECK(view[2] == 14);
  CHECK(view.first() == 2);
  CHECK(view.stride() == 6);
  CHECK(view.end() - view.begin() == 3);
  CHECK(view.begin()[1] == 8);
  CHECK(*(view.end() - 1) == 14);
  auto it = view.end();
  --it;
  CHECK(*it-- == 14);
  CHECK(*it == 8);
  CHECK(view.begin() < view.end());
  std::vector<std::size_t> reversed(std::make_reverse_iterator(view.end()),
                                    std::make_reverse_iterator(view.begin()));
  CHECK(reversed == std::vector<std::size_t>{14, 8, 2});
  CHECK(data::StridedShard{}.empty());
}

TEST_CASE("shard and shard_strided reject bad shard arguments") {
  CHECK_THROWS_WITH_AS(data::shard(10, 0, 0),
                       "strata: data::shard: count is 0; pass the number of shards, at least 1",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(data::shard(10, 4, 4),
                       "strata: data::shard: shard index 4 is out of range for 4 shards; pass a "
                       "shard index in [0, count)",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(data::shard_strided(10, 3, 2),
                       doctest::Contains("data::shard_strided: shard index 3 is out of range"),
                       strata::UsageError);
  CHECK_THROWS_AS(data::shard_indices_strided(10, 0, 0), strata::UsageError);
}
