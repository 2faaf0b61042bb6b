// Synchronous steps on a shard (ps/detail/shard.hpp) with backup replicas (TF1's
// SyncReplicasOptimizer: a step aggregates the first `bound` gradients, a late one is dropped)
// and with workers that finish (their replicas no longer hold a step back).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <strata/ps/detail/shard.hpp>
#include <strata/ps/protocol.hpp>

namespace {

using strata::ps::OptimizerSpec;
using strata::ps::SyncSpec;
using strata::ps::detail::PushOutcome;
using strata::ps::detail::Shard;
using strata::ps::detail::Values;

constexpr std::size_t kElements = 5;
const OptimizerSpec kSgd{OptimizerSpec::Kind::sgd, 1.0, 0, 0, 0, 0};

Shard make_shard() {
  Shard shard;
  shard.name = "synchronous";
  shard.type = strata::DataType::float32;
  shard.elements = kElements;
  shard.data = Values<float>{std::vector<float>(kElements, 0.0f), {}, {}, {}};
  return shard;
}

// Replica r is worker r's only replica, and its caller is callers[r].
struct Replicas {
  explicit Replicas(std::uint32_t count, std::uint32_t quorum) : count(count), quorum(quorum) {}

  PushOutcome push(Shard& shard, std::uint32_t replica, std::uint64_t step, float gradient) {
    SyncSpec spec;
    spec.mode = SyncSpec::Mode::synchronous;
    spec.aggregation = SyncSpec::Aggregation::mean;
    spec.replica = replica;
    spec.replicas = count;
    spec.bound = quorum;
    spec.step = step;
    std::vector<float> values(kElements, gradient);
    return strata::ps::detail::push(shard, std::get<Values<float>>(shard.data), kSgd, spec, values,
                                    static_cast<int>(replica), &callers[replica]);
  }

  void* caller(std::uint32_t replica) { return &callers[replica]; }

  std::uint32_t count;
  std::uint32_t quorum;
  std::array<int, 8> callers{};
};

float value_of(const Shard& shard) {
  const auto& values = std::get<Values<float>>(shard.data).values;
  CHECK(std::all_of(values.begin(), values.end(), [&](float v) { return v == values.front(); }));
  return values.front();
}

}  // namespace

TEST_CASE("a step aggregates its quorum, and a backup's late gradient is dropped") {
  Shard shard = make_shard();
  Replicas replicas(3, 2);  // one backup replica
  CHECK(replicas.push(shard, 0, 0, 1.0f).kind == PushOutcome::Kind::wait);
  const PushOutcome second = replicas.push(shard, 1, 0, 3.0f);
  CHECK(second.kind == PushOutcome::Kind::reply);
  REQUIRE(second.released.size() == 1);
  CHECK(second.released.front() == replicas.caller(0));
  CHECK(shard.version == 1);
  CHECK(value_of(shard) == -2.0f);  // the mean of 1 and 3, SGD at rate 1

  // The backup computed on step 0, which is gone: dropped, answered at once.
  const PushOutcome late = replicas.push(shard, 2, 0, 100.0f);
  CHECK(late.kind == PushOutcome::Kind::reply);
  CHECK(late.released.empty());
  CHECK(shard.stale == 1);
  CHECK(shard.version == 1);
  CHECK(value_of(shard) == -2.0f);

  // From the new values it is in the next step like the others; whoever comes first counts.
  CHECK(replicas.push(shard, 2, 1, 2.0f).kind == PushOutcome::Kind::wait);
  CHECK(replicas.push(shard, 0, 1, 4.0f).kind == PushOutcome::Kind::reply);
  CHECK(shard.version == 2);
  CHECK(value_of(shard) == -5.0f);
  CHECK(replicas.push(shard, 1, 1, 50.0f).kind == PushOutcome::Kind::reply);  // late
  CHECK(shard.stale == 2);
  CHECK(value_of(shard) == -5.0f);
}

TEST_CASE("a finished worker's replicas no longer hold a step back") {
  Shard shard = make_shard();
  Replicas replicas(3, 3);  // every replica: sync::Synchronous
  CHECK(replicas.push(shard, 0, 0, 1.0f).kind == PushOutcome::Kind::wait);
  CHECK(replicas.push(shard, 1, 0, 2.0f).kind == PushOutcome::Kind::wait);
  CHECK(replicas.push(shard, 2, 0, 3.0f).kind == PushOutcome::Kind::reply);
  CHECK(value_of(shard) == -2.0f);
  CHECK(replicas.push(shard, 0, 1, 1.0f).kind == PushOutcome::Kind::wait);
  CHECK(replicas.push(shard, 1, 1, 3.0f).kind == PushOutcome::Kind::wait);
  // Worker 2 ran its last step: the two gradients in complete the step.
  auto released = strata::ps::detail::finished(shard, 2);
  std::sort(released.begin(), released.end());
  std::vector<void*> expected{replicas.caller(0), replicas.caller(1)};
  std::sort(expected.begin(), expected.end());
  CHECK(released == expected);
  CHECK(shard.version == 2);
  CHECK(value_of(shard) == -4.0f);
  // From now on a step waits for the two replicas left.
  CHECK(replicas.push(shard, 1, 2, 1.0f).kind == PushOutcome::Kind::wait);
  CHECK(replicas.push(shard, 0, 2, 1.0f).kind == PushOutcome::Kind::reply);
  CHECK(shard.version == 3);
  // Finishing with nothing waiting releases nobody; the last worker's step then needs itself.
  CHECK(strata::ps::detail::finished(shard, 1).empty());
  CHECK(replicas.push(shard, 0, 3, 1.0f).kind == PushOutcome::Kind::reply);
  CHECK(shard.version == 4);
}
