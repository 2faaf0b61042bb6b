// Tests for strata/ps/shard_placement.hpp: TF2's round robin over every shard, TF1's greedy
// byte balancing, and the load report.
#include <strata/ps/shard_placement.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <doctest/doctest.h>

#include <strata/ps/partitioner.hpp>

namespace ps = strata::ps;
using Bytes = std::vector<std::uint64_t>;

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

Bytes loads(std::span<const std::uint64_t> bytes_per_task) {
  return Bytes(bytes_per_task.begin(), bytes_per_task.end());
}

// Places `shard_bytes` in order and returns the task of each.
template <ps::ShardPlacement Placement>
std::vector<int> place_all(Placement& placement, const std::vector<std::uint64_t>& shard_bytes) {
  std::vector<int> tasks;
  for (const std::uint64_t bytes : shard_bytes)
    tasks.push_back(placement.place(bytes));
  return tasks;
}

std::uint64_t max_load(std::span<const std::uint64_t> bytes_per_task) {
  return *std::max_element(bytes_per_task.begin(), bytes_per_task.end());
}

}  // namespace

TEST_CASE("round robin continues across variables with one counter, as TF2 does") {
  ps::RoundRobinPlacement placement(2);
  CHECK(placement.num_tasks() == 2);
  CHECK(loads(placement.bytes_per_task()) == Bytes{0, 0});
  // A variable of 10 x 3 float32 in 3 shards (4, 3, 3 rows of 12 bytes): tasks 0, 1, 0 ...
  std::vector<int> tasks;
  for (const ps::RowRange& shard :
       ps::shard_variable(ps::FixedShardsPartitioner{3}, std::vector<std::size_t>{10, 3}, 4))
    tasks.push_back(placement.place(shard.rows * 12));
  CHECK(tasks == std::vector<int>{0, 1, 0});
  CHECK(loads(placement.bytes_per_task()) == Bytes{48 + 36, 36});
  // ... and the next variable starts where the last one stopped, whatever its size.
  CHECK(placement.place(1000) == 1);
  CHECK(placement.place(8) == 0);
  CHECK(placement.place(0) == 1);
  CHECK(loads(placement.bytes_per_task()) == Bytes{84 + 8, 36 + 1000});

  ps::RoundRobinPlacement three(3);
  CHECK(place_all(three, Bytes(7, 1)) == std::vector<int>{0, 1, 2, 0, 1, 2, 0});
  ps::RoundRobinPlacement one(1);
  CHECK(place_all(one, Bytes{5, 6, 7}) == std::vector<int>{0, 0, 0});
  CHECK(loads(one.bytes_per_task()) == Bytes{18});
}

TEST_CASE("greedy places on the least-loaded task, ties to the lowest index (TF1's tests)") {
  // GreedyLoadBalancingStrategyTest.testByteSizeLoadFn: float32 variables [2, 2], [2, 1],
  // [2, 2], [1, 3] (16, 8, 16, 12 bytes) on 2 ps tasks go to tasks 0, 1, 1, 0.
  ps::GreedyPlacement greedy(2);
  CHECK(place_all(greedy, Bytes{16, 8, 16, 12}) == std::vector<int>{0, 1, 1, 0});
  CHECK(loads(greedy.bytes_per_task()) == Bytes{28, 24});
  // testUniformLoadEqualsRoundRobin: equal loads alternate, like round robin.
  ps::GreedyPlacement uniform(2);
  ps::RoundRobinPlacement round_robin(2);
  const Bytes equal(9, 1);
  CHECK(place_all(uniform, equal) == place_all(round_robin, equal));
  // A zero-byte shard leaves its task the least loaded.
  ps::GreedyPlacement zeros(3);
  CHECK(place_all(zeros, Bytes{0, 0, 5, 0}) == std::vector<int>{0, 0, 0, 1});
}

TEST_CASE("greedy balances a skewed model better than round robin") {
  // One 100 MiB embedding (unsharded) followed by 40 tensors of 4 MiB, on 4 ps tasks. Round
  // robin puts the embedding and 10 small tensors on task 0; greedy keeps the small ones off it.
  Bytes model{100 * kMiB};
  model.insert(model.end(), 40, 4 * kMiB);
  const std::uint64_t total = std::accumulate(model.begin(), model.end(), std::uint64_t{0});

  ps::RoundRobinPlacement round_robin(4);
  ps::GreedyPlacement greedy(4);
  place_all(round_robin, model);
  const std::vector<int> greedy_tasks = place_all(greedy, model);

  CHECK(loads(round_robin.bytes_per_task()) == Bytes{140 * kMiB, 40 * kMiB, 40 * kMiB, 40 * kMiB});
  CHECK(std::count(greedy_tasks.begin() + 1, greedy_tasks.end(), 0) == 0);
  CHECK(max_load(greedy.bytes_per_task()) == 100 * kMiB);
  CHECK(max_load(greedy.bytes_per_task()) < max_load(round_robin.bytes_per_task()));
  const auto round_robin_bytes = round_robin.bytes_per_task();
  const auto greedy_bytes = greedy.bytes_per_task();
  CHECK(std::accumulate(round_robin_bytes.begin(), round_robin_bytes.end(), std::uint64_t{0}) ==
        total);
  CHECK(std::accumulate(greedy_bytes.begin(), greedy_bytes.end(), std::uint64_t{0}) == total);

  // The embedding sharded by MaxSizePartitioner (at most 32 MiB per shard, rows of 256 float32:
  // 4 shards of 25 MiB) gives greedy even pieces to spread: every task ends with 65 MiB.
  ps::GreedyPlacement sharded(4);
  const std::vector<std::size_t> embedding{102'400, 256};
  const std::vector<ps::RowRange> shards =
      ps::shard_variable(ps::MaxSizePartitioner{.max_shard_bytes = 32 * kMiB}, embedding, 4);
  CHECK(shards.size() == 4);
  for (const ps::RowRange& shard : shards)
    sharded.place(shard.rows * 256 * 4);
  for (int i = 0; i < 40; ++i)
    sharded.place(4 * kMiB);
  CHECK(loads(sharded.bytes_per_task()) == Bytes{65 * kMiB, 65 * kMiB, 65 * kMiB, 65 * kMiB});
}

TEST_CASE("placements reject clusters without ps tasks") {
  CHECK_THROWS_WITH_AS(ps::RoundRobinPlacement(0),
                       "strata: ps::RoundRobinPlacement: num_ps is 0; pass the number of ps tasks "
                       "in the cluster, at least 1",
                       strata::UsageError);
  CHECK_THROWS_AS(ps::RoundRobinPlacement(-1), strata::UsageError);
  CHECK_THROWS_WITH_AS(ps::GreedyPlacement(0),
                       doctest::Contains("ps::GreedyPlacement: num_ps is 0"), strata::UsageError);
}

TEST_CASE("describe_load prints one entry per task in binary units") {
  CHECK(ps::format_bytes(0) == "0 B");
  CHECK(ps::format_bytes(1023) == "1023 B");
  CHECK(ps::format_bytes(1536) == "1.5 KiB");
  CHECK(ps::format_bytes(100 * kMiB) == "100.0 MiB");
  CHECK(ps::format_bytes(std::uint64_t{3} << 30) == "3.0 GiB");
  CHECK(ps::describe_load(Bytes{100 * kMiB, 2 * kMiB, 512}) ==
        "ps 0: 100.0 MiB, ps 1: 2.0 MiB, ps 2: 512 B");
  CHECK(ps::describe_load(Bytes{}) == "");
  ps::GreedyPlacement greedy(2);
  greedy.place(1024);
  CHECK(ps::describe_load(greedy.bytes_per_task()) == "ps 0: 1.0 KiB, ps 1: 0 B");
}
