// New policies plug into Strategy without touching the existing ones (ARCHITECTURE.md, "The
// seams"): a toy placement that stores variables its own way, and a toy sync policy that
// delivers gradients its own way, each composed with the library's other two policies, train
// the example's model to the same parameters as the library's strategies.
#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <deque>
#include <span>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <strata/strata.hpp>

#include "../../examples/logistic_regression.hpp"

namespace toy {

using strata::placement::UpdateSite;
using strata::placement::VariableAggregation;

/// A variable that keeps each replica's copy in a deque of its own and counts the updates
/// applied to it: storage strata's placements know nothing about.
template <std::floating_point T>
class CountedVariable {
 public:
  CountedVariable(int copies, std::span<const T> initial, VariableAggregation aggregation)
      : copies_(static_cast<std::size_t>(copies), std::vector<T>(initial.begin(), initial.end())),
        aggregation_(aggregation) {}

  std::size_t size() const noexcept { return copies_.front().size(); }
  VariableAggregation aggregation() const noexcept { return aggregation_; }
  std::span<const T> read() const noexcept { return copies_.front(); }
  void assign(std::span<const T> values) {
    for (auto& copy : copies_)
      std::copy(values.begin(), values.end(), copy.begin());
  }

  std::vector<T>& copy(int replica) { return copies_[static_cast<std::size_t>(replica)]; }
  const std::vector<T>& copy(int replica) const {
    return copies_[static_cast<std::size_t>(replica)];
  }
  int updates() const noexcept { return updates_.load(); }
  void count_update() noexcept { ++updates_; }

 private:
  std::deque<std::vector<T>> copies_;
  VariableAggregation aggregation_;
  std::atomic<int> updates_{0};
};

// [snippet:placement]
/// A copy per replica in CountedVariables, updated by plain SGD steps the placement applies
/// itself (it keeps no optimizer slots, so it takes only slot-free optimizers).
struct CountedMirrored {
  static constexpr std::string_view kName = "CountedMirrored";
  static constexpr int kMaxReplicas = 64;
  static constexpr UpdateSite kUpdateSite = UpdateSite::every_replica;

  template <std::floating_point T>
  using variable_type = CountedVariable<T>;

  template <std::floating_point T>
  static CountedVariable<T> create(int replicas, std::span<const T> initial,
                                   VariableAggregation aggregation) {
    return CountedVariable<T>(replicas, initial, aggregation);
  }
  template <std::floating_point T>
  static std::span<const T> read(const CountedVariable<T>& variable, int replica) {
    return variable.copy(replica);
  }
  template <std::floating_point T>
  static std::span<T> write_target(CountedVariable<T>& variable, int replica) {
    return variable.copy(replica);
  }
  template <class O, std::floating_point T>
  static void apply(CountedVariable<T>& variable, int replica, const O& optimizer,
                    std::span<const T> gradient) {
    static_assert(O::kSlots == 0, "CountedMirrored keeps no optimizer slots");
    strata::optim::OptimizerState<T> none;
    optimizer.apply(std::span<T>(variable.copy(replica)), gradient, none);
    variable.count_update();
  }
};
// [end-snippet:placement]

// [snippet:sync]
/// Delivers the aggregated gradient to every replica whatever the placement, and lets the
/// placement decide who writes: an all-reduce where Synchronous would reduce to one replica.
struct AllReduceEverywhere {
  static constexpr std::string_view kName = "AllReduceEverywhere";
  static constexpr bool kWaitsForAllReplicas = true;

  template <class Context, class O, class Variable, class T>
  static void apply_gradients(Context& context, const O& optimizer, std::span<T> gradient,
                              Variable& variable) {
    using P = typename Context::placement_type;
    const bool many = context.num_replicas_in_sync() > 1;
    const auto op = variable.aggregation() == VariableAggregation::sum ? strata::ReduceOp::sum
                                                                       : strata::ReduceOp::mean;
    // Every replica has read the old value once the all-reduce returns.
    if (many) context.communicator().all_reduce(gradient, op);
    P::apply(variable, context.local_replica_id(), optimizer, std::span<const T>(gradient));
    if (many && P::kUpdateSite == UpdateSite::one_replica) context.communicator().barrier();
  }

  template <class Context, class Variable, class T>
  static void assign(Context& context, Variable& variable, std::span<const T> value) {
    using P = typename Context::placement_type;
    std::vector<T> aggregated(value.begin(), value.end());
    if (context.num_replicas_in_sync() > 1)
      context.communicator().all_reduce(std::span(aggregated), strata::ReduceOp::mean);
    // Replicas that write nothing (all but replica 0 of a shared copy) get an empty target.
    const auto target = P::write_target(variable, context.local_replica_id());
    if (!target.empty()) std::copy(aggregated.begin(), aggregated.end(), target.begin());
    if (context.num_replicas_in_sync() > 1) context.communicator().barrier();
  }
};
// [end-snippet:sync]

}  // namespace toy

namespace {

using namespace strata;

static_assert(placement::Placement<toy::CountedMirrored>);
static_assert(sync::Sync<toy::AllReduceEverywhere>);
static_assert(communicator::ReplicaGroup<communicator::LocalCommunicator<>>);
static_assert(communicator::ReplicaGroup<communicator::SelfCommunicator>);
static_assert(communicator::ReplicaGroup<communicator::TcpCommunicator>);
static_assert(communicator::ReplicaGroup<communicator::HierarchicalCommunicator<>>);
static_assert(communicator::HierarchicalCommunicator<>::kSpansProcesses);
static_assert(!communicator::LocalCommunicator<>::kSpansProcesses);

using CountedMirroredStrategy =
    Strategy<toy::CountedMirrored, communicator::LocalCommunicator<>, sync::Synchronous>;
using CentralAllReduceStrategy =
    Strategy<placement::CentralStorage, communicator::LocalCommunicator<>,
             toy::AllReduceEverywhere>;
using MirroredAllReduceStrategy =
    Strategy<placement::Mirrored, communicator::LocalCommunicator<>, toy::AllReduceEverywhere>;

example::TrainConfig config() {
  example::TrainConfig c;
  c.global_batch = 64;
  c.epochs = 10;
  return c;
}

const example::Problem& problem() {
  static const example::Problem p = example::make_problem(500, 6);
  return p;
}

template <class Strategy>
example::TrainResult train(Strategy& strategy) {
  return example::train(strategy, problem(), config(), [](std::size_t, double) {});
}

bool same(const example::TrainResult& a, const example::TrainResult& b) {
  return a.weights == b.weights && a.bias == b.bias;
}

}  // namespace

TEST_CASE("a placement of its own plugs into Strategy: same model, its own storage") {
  MirroredStrategy mirrored({.num_replicas = 3});
  CountedMirroredStrategy counted({.num_replicas = 3});
  const auto expected = train(mirrored);
  const auto got = train(counted);
  CHECK(same(expected, got));

  // The strategy reached the placement's storage and its update: 3 replicas x 2 variables.
  auto variable = counted.create_variable<float>(std::vector<float>{1.0f, 2.0f});
  CHECK(variable.updates() == 0);
  counted.run([&](auto& replica) {
    std::vector<float> gradient{0.5f, 0.5f};
    CHECK(replica.read(variable)[1] == 2.0f);
    replica.apply_gradients(optim::Sgd{1.0}, std::span(gradient), variable);
  });
  CHECK(variable.updates() == 3);
  for (int r = 0; r < 3; ++r)
    CHECK(variable.copy(r) == std::vector<float>{0.5f, 1.5f});
}

TEST_CASE("a sync policy of its own plugs into Strategy with either update site") {
  CentralStorageStrategy central({.num_replicas = 4});
  CentralAllReduceStrategy central_all_reduce({.num_replicas = 4});
  MirroredAllReduceStrategy mirrored_all_reduce({.num_replicas = 4});
  const auto expected = train(central);
  // Reduce-to-one and all-reduce in process both add in rank order: the same bits.
  CHECK(same(expected, train(central_all_reduce)));
  CHECK(same(expected, train(mirrored_all_reduce)));

  auto variable = central_all_reduce.create_variable<double>(std::vector<double>{0.0, 0.0});
  central_all_reduce.run([&](auto& replica) {
    const double r = replica.replica_id_in_sync_group();
    std::vector<double> value{r, 2 * r};
    replica.assign(variable, std::span<const double>(value));
  });
  CHECK(variable.read()[0] == doctest::Approx(1.5));  // the mean of 0, 1, 2, 3
  CHECK(variable.read()[1] == doctest::Approx(3.0));
}
