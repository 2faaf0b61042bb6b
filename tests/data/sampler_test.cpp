// Tests for strata/data/sampler.hpp: global batches cover each epoch exactly, replicas cover
// each global batch exactly and in order, and the schedule matches single-replica training.
#include <strata/data/sampler.hpp>

#include <strata/data/shuffle.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace data = strata::data;

namespace {

const std::size_t kExamples[] = {0, 1, 2, 7, 10, 13, 64, 97, 100};
const std::size_t kBatches[] = {1, 2, 3, 7, 10, 16, 100, 128};

struct Topology {
  std::size_t workers;
  std::size_t replicas;
};
const Topology kTopologies[] = {{1, 1}, {1, 2}, {1, 3}, {2, 1}, {2, 2}, {3, 5}, {4, 8}, {5, 3}};

}  // namespace

TEST_CASE("steps_per_epoch rounds up, or down when dropping the remainder") {
  CHECK(data::EpochSampler({.num_examples = 10, .global_batch = 4}).steps_per_epoch() == 3);
  CHECK(data::EpochSampler({.num_examples = 10, .global_batch = 4, .drop_remainder = true})
            .steps_per_epoch() == 2);
  CHECK(data::EpochSampler({.num_examples = 12, .global_batch = 4}).steps_per_epoch() == 3);
  CHECK(data::EpochSampler({.num_examples = 3, .global_batch = 4}).steps_per_epoch() == 1);
  CHECK(data::EpochSampler({.num_examples = 3, .global_batch = 4, .drop_remainder = true})
            .steps_per_epoch() == 0);
  CHECK(data::EpochSampler({.num_examples = 0, .global_batch = 4}).steps_per_epoch() == 0);
}

TEST_CASE("global batches follow the epoch order: single-replica equivalence") {
  for (const bool shuffle : {false, true}) {
    for (const bool drop : {false, true}) {
      for (const std::size_t n : kExamples) {
        for (const std::size_t batch : kBatches) {
          CAPTURE(shuffle);
          CAPTURE(drop);
          CAPTURE(n);
          CAPTURE(batch);
          const data::EpochSampler sampler({.num_examples = n,
                                            .global_batch = batch,
                                            .seed = 42,
                                            .shuffle = shuffle,
                                            .drop_remainder = drop});
          for (const std::uint64_t epoch : {0ull, 1ull, 7ull}) {
            std::vector<std::size_t> expected(n);
            if (shuffle) {
              expected = data::epoch_permutation(n, 42, epoch);
            } else {
              for (std::size_t i = 0; i < n; ++i)
                expected[i] = i;
            }
            std::vector<std::size_t> visited;
            for (std::size_t step = 0; step < sampler.steps_per_epoch(); ++step) {
              const auto indices = sampler.global_batch_indices(epoch, step);
              CHECK(indices.size() == sampler.global_batch_size(step));
              CHECK((indices.size() == batch || step + 1 == sampler.steps_per_epoch()));
              visited.insert(visited.end(), indices.begin(), indices.end());
            }
            if (drop) {
              CHECK(visited.size() == n / batch * batch);
              expected.resize(visited.size());
            }
            // Without drop: every example exactly once; with drop: the epoch order's prefix.
            CHECK(visited == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("replicas of all workers cover each global batch exactly, in rank order") {
  for (const bool drop : {false, true}) {
    for (const std::size_t n : kExamples) {
      for (const std::size_t batch : kBatches) {
        const data::EpochSampler sampler(
            {.num_examples = n, .global_batch = batch, .seed = 3, .drop_remainder = drop});
        for (const Topology t : kTopologies) {
          CAPTURE(drop);
          CAPTURE(n);
          CAPTURE(batch);
          CAPTURE(t.workers);
          CAPTURE(t.replicas);
          for (std::size_t step = 0; step < sampler.steps_per_epoch(); ++step) {
            const auto global = sampler.global_batch_indices(2, step);
            std::vector<std::size_t> joined;
            std::size_t smallest = global.size(), largest = 0;
            for (std::size_t w = 0; w < t.workers; ++w) {
              for (std::size_t r = 0; r < t.replicas; ++r) {
                const auto part = sampler.replica_indices(2, step, w, t.workers, r, t.replicas);
                const data::Slice slice = sampler.replica_slice(step, w, t.workers, r, t.replicas);
                CHECK(slice.offset == joined.size());
                CHECK(slice.size == part.size());
                CHECK(slice ==
                      data::split_batch(global.size(), w * t.replicas + r, t.workers * t.replicas));
                smallest = std::min(smallest, part.size());
                largest = std::max(largest, part.size());
                joined.insert(joined.end(), part.begin(), part.end());
              }
            }
            CHECK(joined == global);
            CHECK(largest - smallest <= 1);
          }
        }
      }
    }
  }
}

TEST_CASE("every worker computes the same schedule; epochs differ") {
  const data::EpochSamplerOptions options{.num_examples = 1000, .global_batch = 64, .seed = 7};
  const data::EpochSampler worker0(options), worker1(options);
  for (std::size_t step = 0; step < worker0.steps_per_epoch(); ++step)
    CHECK(worker0.global_batch_indices(5, step) == worker1.global_batch_indices(5, step));
  CHECK(worker0.global_batch_indices(0, 0) != worker0.global_batch_indices(1, 0));
  const data::EpochSampler other_seed({.num_examples = 1000, .global_batch = 64, .seed = 8});
  CHECK(worker0.global_batch_indices(0, 0) != other_seed.global_batch_indices(0, 0));

  // Going back to an earlier epoch (a restart from a checkpoint) gives the same batches.
  const auto first = worker0.global_batch_indices(3, 2);
  (void)worker0.global_batch_indices(4, 2);
  CHECK(worker0.global_batch_indices(3, 2) == first);

  // Copies answer identically.
  const data::EpochSampler copy = worker0;
  CHECK(copy.replica_indices(9, 4, 1, 2, 1, 2) == worker0.replica_indices(9, 4, 1, 2, 1, 2));
  CHECK(copy.options().seed == 7);
}

TEST_CASE("replicas on threads may ask concurrently, across epoch changes") {
  const data::EpochSampler sampler({.num_examples = 5000, .global_batch = 100, .seed = 1});
  constexpr std::size_t kReplicas = 4;
  std::vector<std::vector<std::size_t>> seen(kReplicas);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < kReplicas; ++r) {
    threads.emplace_back([&sampler, &seen, r] {
      for (std::uint64_t epoch = 0; epoch < 3; ++epoch)
        for (std::size_t step = 0; step < sampler.steps_per_epoch(); ++step) {
          const auto part = sampler.replica_indices(epoch, step, 0, 1, r, kReplicas);
          seen[r].insert(seen[r].end(), part.begin(), part.end());
        }
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    const auto order = data::epoch_permutation(5000, 1, epoch);
    for (std::size_t r = 0; r < kReplicas; ++r) {
      // Replica r holds positions [25 r, 25 r + 25) of every global batch of 100.
      for (std::size_t step = 0; step < 50; ++step)
        for (std::size_t k = 0; k < 25; ++k)
          REQUIRE(seen[r][epoch * 1250 + step * 25 + k] == order[step * 100 + r * 25 + k]);
    }
  }
}

TEST_CASE("EpochSampler rejects bad arguments") {
  CHECK_THROWS_WITH_AS(data::EpochSampler({.num_examples = 10, .global_batch = 0}),
                       "strata: data::EpochSampler: global_batch is 0; set global_batch to the "
                       "number of examples per step over all replicas, at least 1",
                       strata::UsageError);

  const data::EpochSampler sampler({.num_examples = 10, .global_batch = 4, .drop_remainder = true});
  CHECK_THROWS_WITH_AS(sampler.global_batch_indices(0, 2),
                       "strata: data::EpochSampler::global_batch_indices: step 2 is out of "
                       "range: an epoch of 10 examples in global batches of 4 (dropping the "
                       "remainder) has 2 steps; pass a step in [0, steps_per_epoch())",
                       strata::UsageError);
  CHECK_THROWS_AS(sampler.global_batch_size(2), strata::UsageError);
  CHECK_THROWS_WITH_AS(sampler.replica_indices(0, 5, 0, 1, 0, 1),
                       doctest::Contains("data::EpochSampler::replica_indices: step 5 is out"),
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(sampler.replica_indices(0, 0, 2, 2, 0, 1),
                       "strata: data::EpochSampler::replica_indices: worker 2 is out of range "
                       "for 2 workers; pass a worker index in [0, num_workers)",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(sampler.replica_indices(0, 0, 0, 2, 3, 3),
                       "strata: data::EpochSampler::replica_indices: replica 3 is out of range "
                       "for 3 replicas per worker; pass a replica index in [0, num_replicas)",
                       strata::UsageError);
  CHECK_THROWS_WITH_AS(sampler.replica_indices(0, 0, 0, 0, 0, 1),
                       doctest::Contains("num_workers is 0 and num_replicas is 1"),
                       strata::UsageError);
  CHECK_THROWS_AS(sampler.replica_indices(0, 0, 0, 1, 0, 0), strata::UsageError);
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  CHECK_THROWS_WITH_AS(sampler.replica_slice(0, 0, huge, 0, 4),
                       doctest::Contains("data::EpochSampler::replica_slice"), strata::UsageError);
}
