// The list form of ReplicaContext::apply_gradients: under every in-process strategy it ends
// where one call per variable ends, bit for bit (the same aggregated gradients, fused into
// buckets), with every aggregation, empty variables, buffers that move between steps, and two
// element types, and gradients made ready one by one in a different order on every replica;
// replicas that pass different lists get MismatchError; compression keeps the mirrored copies
// identical.
#include <algorithm>
#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <strata/core/error.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/strategies.hpp>

namespace {

using strata::gradient_for;
using strata::placement::VariableAggregation;

// Gradient values that are multiples of 1/8 of modest size: sums over replicas are exact in any
// order, so both forms must agree to the bit whatever order a collective adds them in.
template <class T>
std::vector<T> gradient_of(std::size_t n, int replica, int step, int salt) {
  std::vector<T> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] =
        static_cast<T>((static_cast<int>(i) * 5 + replica * 3 + step * 7 + salt) % 17 - 8) / T(8);
  return g;
}

struct Sizes {
  std::size_t w = 1000, b = 1, empty = 0, first = 37, d = 129;
};

// Trains 4 steps with Momentum over float variables w (mean), b (sum), an empty one and one
// that takes the first replica's gradient, and SGD over a double variable; `fused` picks the
// list form. Returns every variable's values (float ones first) as doubles.
// How a step hands its gradients over.
enum class Form { one_call_per_variable, list, ready_in_random_order };

template <class Strategy>
std::vector<double> train(int replicas, Form form, bool moving_buffers = false,
                          strata::fusion::BucketOptions fusion = {}) {
  Strategy strategy({.num_replicas = replicas, .fusion = fusion});
  const Sizes n;
  auto w = strategy.template create_variable<float>(std::vector<float>(n.w, 0.5f));
  auto b = strategy.template create_variable<float>(std::vector<float>(n.b, 1.0f),
                                                    VariableAggregation::sum);
  auto empty = strategy.template create_variable<float>(std::vector<float>{});
  const auto first_aggregation = strategy.num_replicas_in_sync() > 1
                                     ? VariableAggregation::only_first_replica
                                     : VariableAggregation::mean;
  auto first = strategy.template create_variable<float>(std::vector<float>(n.first, -1.0f),
                                                        first_aggregation);
  auto d = strategy.template create_variable<double>(std::vector<double>(n.d, 2.0));
  const strata::optim::Momentum momentum{0.125f, 0.5f};
  const strata::optim::Sgd sgd{0.25};
  // Each replica's gradient buffers; with moving_buffers, new ones every step.
  struct Buffers {
    std::vector<float> w, b, empty, first;
    std::vector<double> d;
  };
  std::vector<Buffers> buffers(static_cast<std::size_t>(strategy.num_local_replicas()));
  for (int step_number = 0; step_number < 4; ++step_number) {
    const int step = step_number;
    strategy.run([&](auto& replica) {
      const int id = replica.replica_id_in_sync_group();
      Buffers fresh;
      Buffers& mine =
          moving_buffers ? fresh : buffers[static_cast<std::size_t>(replica.local_replica_id())];
      mine.w = gradient_of<float>(n.w, id, step, 1);
      mine.b = gradient_of<float>(n.b, id, step, 2);
      mine.empty.clear();
      mine.first = gradient_of<float>(n.first, id, step, 3);
      mine.d = gradient_of<double>(n.d, id, step, 4);
      if (form == Form::list) {
        replica.apply_gradients(momentum,
                                {gradient_for(w, mine.w), gradient_for(b, mine.b),
                                 gradient_for(empty, mine.empty), gradient_for(first, mine.first)});
        replica.apply_gradients(sgd, {gradient_for(d, mine.d)});
      } else if (form == Form::ready_in_random_order) {
        // Each replica makes the gradients ready in an order of its own, from two threads.
        auto step = replica.begin_apply_gradients(
            momentum, {gradient_for(w, mine.w), gradient_for(b, mine.b),
                       gradient_for(empty, mine.empty), gradient_for(first, mine.first)});
        std::vector<std::size_t> order{0, 1, 2, 3};
        std::mt19937 random(static_cast<unsigned>(id * 31 + step_number * 7 + 1));
        std::shuffle(order.begin(), order.end(), random);
        std::thread other([&] {
          step.ready(order[0]);
          step.ready(order[1]);
        });
        step.ready(order[2]);
        step.ready(order[3]);
        other.join();
        step.apply();
        replica.apply_gradients(sgd, {gradient_for(d, mine.d)});
      } else {
        replica.apply_gradients(momentum, std::span(mine.w), w);
        replica.apply_gradients(momentum, std::span(mine.b), b);
        replica.apply_gradients(momentum, std::span(mine.empty), empty);
        replica.apply_gradients(momentum, std::span(mine.first), first);
        replica.apply_gradients(sgd, std::span(mine.d), d);
      }
    });
  }
  std::vector<double> out;
  for (const auto* variable : {&w, &b, &first}) {
    const auto values = variable->read();
    out.insert(out.end(), values.begin(), values.end());
  }
  const auto values = d.read();
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

template <class Strategy>
void check_list_form_equals_one_call_per_variable(int replicas) {
  const auto reference = train<Strategy>(replicas, Form::one_call_per_variable);
  CHECK(train<Strategy>(replicas, Form::list) == reference);
  CHECK(train<Strategy>(replicas, Form::list, true) == reference);
  CHECK(train<Strategy>(replicas, Form::ready_in_random_order) == reference);
  // Buckets smaller than the variables: w gets a bucket of its own, the rest share.
  const strata::fusion::BucketOptions small{.bucket_bytes = 256, .first_bucket_bytes = 64};
  CHECK(train<Strategy>(replicas, Form::list, false, small) == reference);
  CHECK(train<Strategy>(replicas, Form::ready_in_random_order, false, small) == reference);
}

}  // namespace

TEST_CASE("the list form of apply_gradients ends where one call per variable ends, bit for bit") {
  SUBCASE("MirroredStrategy") {
    check_list_form_equals_one_call_per_variable<strata::MirroredStrategy>(3);
  }
  SUBCASE("CentralStorageStrategy") {
    check_list_form_equals_one_call_per_variable<strata::CentralStorageStrategy>(3);
  }
  SUBCASE("OneDeviceStrategy") {
    check_list_form_equals_one_call_per_variable<strata::OneDeviceStrategy>(1);
  }
  SUBCASE("DefaultStrategy") {
    check_list_form_equals_one_call_per_variable<strata::DefaultStrategy>(1);
  }
}

TEST_CASE("replicas that pass different lists get MismatchError") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  auto w = strategy.create_variable<float>(std::vector<float>(8, 0.0f));
  auto b = strategy.create_variable<float>(std::vector<float>(3, 0.0f));
  const strata::optim::Sgd sgd{0.1};
  CHECK_THROWS_AS(strategy.run([&](auto& replica) {
    std::vector<float> gw(8, 1.0f);
    std::vector<float> gb(3, 1.0f);
    if (replica.local_replica_id() == 0)
      replica.apply_gradients(sgd, {gradient_for(w, gw), gradient_for(b, gb)});
    else
      replica.apply_gradients(sgd, {gradient_for(b, gb), gradient_for(w, gw)});
  }),
                  strata::MismatchError);
}

TEST_CASE("a step's gradients are each made ready once before it applies") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  auto w = strategy.create_variable<float>(std::vector<float>(8, 0.0f));
  auto b = strategy.create_variable<float>(std::vector<float>(3, 0.0f));
  const strata::optim::Sgd sgd{0.1};
  strategy.run([&](auto& replica) {
    std::vector<float> gw(8, 1.0f);
    std::vector<float> gb(3, 1.0f);
    auto step = replica.begin_apply_gradients(sgd, {gradient_for(w, gw), gradient_for(b, gb)});
    CHECK_THROWS_AS(step.ready(2), strata::UsageError);
    step.ready(1);
    CHECK_THROWS_AS(step.ready(1), strata::UsageError);
    CHECK_THROWS_WITH_AS(step.apply(), doctest::Contains("gradient 0"), strata::UsageError);
    step.ready(0);
    step.apply();
  });
  CHECK(w.read()[0] == doctest::Approx(-0.1));
  CHECK(b.read()[2] == doctest::Approx(-0.1));
}

TEST_CASE("a gradient of the wrong size is a usage error before anything is reduced") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  auto w = strategy.create_variable<float>(std::vector<float>(8, 0.0f));
  const strata::optim::Sgd sgd{0.1};
  CHECK_THROWS_AS(strategy.run([&](auto& replica) {
    std::vector<float> g(7, 1.0f);
    replica.apply_gradients(sgd, {gradient_for(w, g)});
  }),
                  strata::UsageError);
}

TEST_CASE("compressed buckets keep the mirrored copies identical, close to float32") {
  using Compression = strata::fusion::Compression;
  std::vector<float> uncompressed;
  for (const auto compression : {Compression::none, Compression::bfloat16, Compression::float16}) {
    CAPTURE(static_cast<int>(compression));
    strata::MirroredStrategy strategy({.num_replicas = 3, .fusion = {.compression = compression}});
    auto w = strategy.create_variable<float>(std::vector<float>(300, 0.0f));
    const strata::optim::Sgd sgd{1.0};
    strategy.run([&](auto& replica) {
      std::vector<float> g(300);
      for (std::size_t i = 0; i < g.size(); ++i)
        g[i] = 0.001f * static_cast<float>(i) +
               0.1f * static_cast<float>(replica.replica_id_in_sync_group());
      replica.apply_gradients(sgd, {gradient_for(w, g)});
    });
    for (std::size_t copy = 1; copy < w.num_copies(); ++copy)
      CHECK(std::equal(w.copy(0).begin(), w.copy(0).end(), w.copy(copy).begin()));
    for (std::size_t i = 0; i < 300; ++i) {
      const double exact = -(0.001 * static_cast<double>(i) + 0.1);  // the mean, negated
      CHECK(w.copy(0)[i] == doctest::Approx(exact).epsilon(1e-2));
    }
    // The list form went through the buckets: the 16-bit transfer rounded the gradients.
    const std::vector<float> values(w.copy(0).begin(), w.copy(0).end());
    if (compression == Compression::none)
      uncompressed = values;
    else
      CHECK(values != uncompressed);
  }
}
