// Tests for strata/data/batch_split.hpp: exact, balanced, contiguous covers of a global batch.
#include <strata/data/batch_split.hpp>

#include <cstddef>
#include <numeric>
#include <vector>

#include <doctest/doctest.h>

namespace data = strata::data;

namespace {

const std::size_t kBatches[] = {0, 1, 2, 3, 5, 7, 10, 13, 31, 64, 97, 100, 1000, 1021};
const std::size_t kReplicas[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 100, 1024};

}  // namespace

TEST_CASE("split_batch gives documented slices") {
  CHECK(data::split_batch(10, 0, 4) == data::Slice{0, 3});
  CHECK(data::split_batch(10, 1, 4) == data::Slice{3, 3});
  CHECK(data::split_batch(10, 2, 4) == data::Slice{6, 2});
  CHECK(data::split_batch(10, 3, 4) == data::Slice{8, 2});
  CHECK(data::split_batch(2, 0, 4) == data::Slice{0, 1});
  CHECK(data::split_batch(2, 1, 4) == data::Slice{1, 1});
  CHECK(data::split_batch(2, 2, 4) == data::Slice{2, 0});
  CHECK(data::split_batch(2, 3, 4) == data::Slice{2, 0});
  CHECK(data::split_batch(64, 5, 8) == data::Slice{40, 8});
  CHECK(data::split_batch(0, 0, 1) == data::Slice{0, 0});
  CHECK(data::split_batch(7, 0, 1) == data::Slice{0, 7});
  CHECK(data::split_batch(10, 3, 4).end() == 10);
}

TEST_CASE("split_batch is an exact, contiguous, balanced cover in replica order") {
  for (const std::size_t batch : kBatches) {
    for (const std::size_t replicas : kReplicas) {
      CAPTURE(batch);
      CAPTURE(replicas);
      std::vector<int> seen(batch, 0);
      std::size_t expected_offset = 0;
      for (std::size_t r = 0; r < replicas; ++r) {
        const data::Slice slice = data::split_batch(batch, r, replicas);
        CHECK(slice.offset == expected_offset);
        // The first batch % replicas replicas get the extra element.
        CHECK(slice.size == batch / replicas + (r < batch % replicas ? 1 : 0));
        for (std::size_t i = slice.offset; i < slice.end(); ++i)
          ++seen[i];
        expected_offset = slice.end();
      }
      CHECK(expected_offset == batch);
      for (const int count : seen)
        CHECK(count == 1);
    }
  }
}

TEST_CASE("uneven slices: sum of (loss sum / global batch) is exact, mean of means is not") {
  // One gradient value per example; the single-replica gradient is their mean.
  const std::vector<double> per_example{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const std::size_t batch = per_example.size(), replicas = 4;  // slices 3, 3, 2, 2
  const double single = std::accumulate(per_example.begin(), per_example.end(), 0.0) / 10;

  double sum_of_scaled = 0, sum_of_means = 0;
  for (std::size_t r = 0; r < replicas; ++r) {
    const data::Slice s = data::split_batch(batch, r, replicas);
    const double local = std::accumulate(per_example.begin() + static_cast<long>(s.offset),
                                         per_example.begin() + static_cast<long>(s.end()), 0.0);
    sum_of_scaled += local / static_cast<double>(batch);  // ReduceOp::sum of these
    sum_of_means += local / static_cast<double>(s.size);  // ReduceOp::mean of these ...
  }
  const double mean_of_means = sum_of_means / replicas;  // ... divides by the replicas
  CHECK(sum_of_scaled == doctest::Approx(single));
  // (2 + 5 + 7.5 + 9.5) / 4 = 6 instead of 5.5: later examples, on smaller slices, weigh more.
  CHECK(mean_of_means == doctest::Approx(6.0));
  CHECK(single == doctest::Approx(5.5));
}

TEST_CASE("split_batch rejects bad replica arguments") {
  CHECK_THROWS_WITH_AS(data::split_batch(8, 0, 0),
                       "strata: data::split_batch: num_replicas is 0; pass the number of "
                       "replicas in sync, at least 1",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(data::split_batch(8, 4, 4),
                       "strata: data::split_batch: replica 4 is out of range for 4 replicas; "
                       "pass a replica index in [0, num_replicas)",
                       strata::UsageError);
  CHECK_THROWS_AS(data::split_batch(0, 7, 3), strata::UsageError);
}
