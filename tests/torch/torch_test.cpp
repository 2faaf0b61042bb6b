// strata/torch.hpp against Debian's libtorch: tensors as spans with their checks, index tensors
// and batch splits, parameters and buffers broadcast, and DistributedModel, whose training with
// the trainer's own torch::optim::SGD (momentum) under MirroredStrategy (1-3 replicas, float and
// double models, replicas that start from different weights) ends where single-model training
// on the whole global batch ends.
#include <strata/torch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/core/error.hpp>
#include <strata/strategies.hpp>

namespace {

TEST_CASE("as_span views a contiguous CPU tensor of its element type, and refuses others") {
  at::Tensor t = torch::arange(6, torch::kFloat32);
  const std::span<float> values = strata::torch::as_span<float>(t);
  REQUIRE(values.size() == 6);
  values[2] = 42.0f;
  CHECK(t[2].item<float>() == 42.0f);  // a view: no copy

  CHECK_THROWS_WITH_AS(strata::torch::as_span<double>(t),
                       doctest::Contains("holds Float, not Double"), strata::UsageError);
  CHECK_THROWS_WITH_AS(strata::torch::as_span<float>(t.view({2, 3}).t(), "weights"),
                       doctest::Contains("weights is not contiguous"), strata::UsageError);
  CHECK_THROWS_WITH_AS(strata::torch::as_span<float>(at::Tensor{}), doctest::Contains("undefined"),
                       strata::UsageError);
  CHECK(strata::torch::as_span<std::int64_t>(torch::zeros({0}, torch::kInt64)).empty());
  at::Tensor halves = torch::ones({3}, torch::kFloat16);
  CHECK(strata::torch::as_span<strata::float16>(halves)[1] == strata::float16(1.0f));

  std::vector<double> mine{1, 2, 3};
  at::Tensor view = strata::torch::as_tensor(std::span(mine));
  view.mul_(2);
  CHECK(mine == std::vector<double>{2, 4, 6});
}

TEST_CASE("index tensors and batch splits") {
  const std::vector<std::size_t> indices{9, 0, 4, 7};
  const at::Tensor index = strata::torch::to_index_tensor(indices);
  CHECK(std::string(c10::toString(index.scalar_type())) == "Long");
  CHECK(index[3].item<std::int64_t>() == 7);

  // 10 over 4 replicas: 3, 3, 2, 2 at 0, 3, 6, 8 (data::split_batch), along dimension 0.
  const at::Tensor batch = torch::arange(20, torch::kInt64).view({10, 2});
  const std::int64_t sizes[] = {3, 3, 2, 2}, offsets[] = {0, 3, 6, 8};
  for (int r = 0; r < 4; ++r) {
    const at::Tensor part = strata::torch::split_batch(batch, r, 4);
    CHECK(part.size(0) == sizes[r]);
    CHECK(part[0][0].item<std::int64_t>() == 2 * offsets[r]);
  }
  CHECK(strata::torch::split_batch(torch::arange(2, torch::kInt64), 3, 4).size(0) == 0);
  CHECK_THROWS_AS(strata::torch::split_batch(torch::tensor(1.0), 0, 2), strata::UsageError);
  CHECK_THROWS_AS(strata::torch::split_batch(batch, 4, 4), strata::UsageError);
}

TEST_CASE("broadcast_parameters gives every replica replica 0's parameters and buffers") {
  strata::MirroredStrategy strategy({.num_replicas = 3});
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < 3; ++r) {
    torch::manual_seed(static_cast<std::uint64_t>(r));
    models.emplace_back(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
    models.back()->named_buffers()["1.running_mean"].fill_(static_cast<float>(r));
  }
  strategy.run([&](auto& ctx) {
    strata::torch::broadcast_parameters(ctx,
                                        *models[static_cast<std::size_t>(ctx.local_replica_id())]);
  });
  for (int r = 1; r < 3; ++r) {
    const auto mine = models[static_cast<std::size_t>(r)]->named_parameters();
    for (const auto& item : models[0]->named_parameters())
      CHECK(torch::equal(item.value(), mine[item.key()]));
    CHECK(models[static_cast<std::size_t>(r)]
              ->named_buffers()["1.running_mean"]
              .sum()
              .item<float>() == 0.0f);
  }
}

struct Net : torch::nn::Module {
  Net()
      : hidden(register_module("hidden", torch::nn::Linear(5, 8))),
        out(register_module("out", torch::nn::Linear(8, 1))),
        unused(register_module("unused", torch::nn::Linear(2, 2))) {}
  at::Tensor forward(const at::Tensor& x) { return out(torch::tanh(hidden(x))); }
  torch::nn::Linear hidden, out, unused;  // `unused` never gets a gradient
};

constexpr int kSteps = 5;
constexpr int kGlobalBatch = 31;  // uneven over 2 and 3 replicas

at::Tensor inputs(int step, c10::ScalarType type) {
  return torch::sin(torch::arange(kGlobalBatch * 5, type).view({kGlobalBatch, 5}) * 0.37 + step);
}
at::Tensor labels(int step, c10::ScalarType type) {
  return torch::cos(torch::arange(kGlobalBatch, type).view({kGlobalBatch, 1}) * 0.5 + step);
}

// The loss of a replica's slice, as a share of the global batch's mean: summed over the slice
// and divided by the global batch, so that summing over replicas gives the global mean exactly
// (data::split_batch explains why averaging uneven slices would not).
at::Tensor loss_share(Net& net, const at::Tensor& x, const at::Tensor& y) {
  return (net.forward(x) - y).pow(2).sum() / kGlobalBatch;
}

torch::optim::SGD sgd_of(Net& net) {
  return torch::optim::SGD(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

// A replica's backward and optimizer step on the aggregated gradients: overlapped (begin_step
// before backward) or after backward.
template <class Model, class Context>
void backward_and_step(Model& model, Context& ctx, torch::optim::Optimizer& optimizer,
                       const at::Tensor& loss, bool overlapped) {
  if (overlapped) {
    auto pending = model.begin_step(ctx);
    loss.backward();
    pending.apply([&] { optimizer.step(); });
  } else {
    loss.backward();
    model.apply_gradients(ctx, [&] { optimizer.step(); });
  }
}

void check_training(int replicas, c10::ScalarType type, bool overlapped) {
  CAPTURE(replicas);
  CAPTURE(c10::toString(type));
  CAPTURE(overlapped);
  strata::MirroredStrategy strategy({.num_replicas = replicas});
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < replicas; ++r) {
    torch::manual_seed(static_cast<std::uint64_t>(100 + r));  // replicas start apart
    nets.push_back(std::make_shared<Net>());
    nets.back()->to(type);
  }
  strata::torch::DistributedModel model(strategy, nets,
                                        strata::placement::VariableAggregation::sum);
  CHECK(model.num_parameters() == 6);
  // The single-model reference starts from replica 0's weights, which construction broadcast.
  auto reference = std::make_shared<Net>();
  reference->to(type);
  {
    torch::NoGradGuard no_grad;
    const auto from = nets[0]->parameters();
    const auto to = reference->parameters();
    for (std::size_t i = 0; i < from.size(); ++i)
      to[i].copy_(from[i]);
  }
  for (const auto& net : nets)
    for (std::size_t i = 0; i < net->parameters().size(); ++i)
      CHECK(torch::equal(net->parameters()[i], nets[0]->parameters()[i]));

  std::vector<torch::optim::SGD> optimizers;
  for (const auto& net : nets)
    optimizers.push_back(sgd_of(*net));
  auto reference_sgd = sgd_of(*reference);
  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor x = inputs(step, type), y = labels(step, type);
    strategy.run([&](auto& ctx) {
      const auto local = static_cast<std::size_t>(ctx.local_replica_id());
      optimizers[local].zero_grad();
      const at::Tensor loss = loss_share(*nets[local], strata::torch::split_batch(x, ctx),
                                         strata::torch::split_batch(y, ctx));
      backward_and_step(model, ctx, optimizers[local], loss, overlapped);
    });
    reference_sgd.zero_grad();
    loss_share(*reference, x, y).backward();
    reference_sgd.step();
  }
  const double tolerance = type == torch::kFloat32 ? 2e-5 : 1e-12;
  for (const auto& net : nets) {
    const auto got = net->parameters();
    const auto expected = reference->parameters();
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      CHECK(torch::allclose(got[i], expected[i], tolerance, tolerance));
      CHECK(torch::equal(got[i], nets[0]->parameters()[i]));  // replicas agree to the bit
    }
  }
}

TEST_CASE("DistributedModel trains as one model on the global batch") {
  for (const int replicas : {1, 2, 3})
    for (const bool overlapped : {false, true}) {
      check_training(replicas, torch::kFloat32, overlapped);
      check_training(replicas, torch::kFloat64, overlapped);
    }
}

// Float hidden layer, double output layer: two lists of gradients, aggregated at apply().
struct MixedNet : torch::nn::Module {
  MixedNet()
      : hidden(register_module("hidden", torch::nn::Linear(5, 4))),
        out(register_module("out", torch::nn::Linear(4, 1))) {
    out->to(torch::kFloat64);
  }
  at::Tensor forward(const at::Tensor& x) {
    return out(torch::tanh(hidden(x)).to(torch::kFloat64));
  }
  torch::nn::Linear hidden, out;
};

TEST_CASE("a model with float and double parameters trains as one model, overlapped or not") {
  for (const bool overlapped : {false, true}) {
    CAPTURE(overlapped);
    strata::MirroredStrategy strategy({.num_replicas = 2});
    std::vector<std::shared_ptr<MixedNet>> nets;
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(static_cast<std::uint64_t>(7 + r));
      nets.push_back(std::make_shared<MixedNet>());
    }
    strata::torch::DistributedModel model(strategy, nets,
                                          strata::placement::VariableAggregation::sum);
    CHECK(model.num_parameters() == 4);
    auto reference = std::make_shared<MixedNet>();
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < reference->parameters().size(); ++i)
        reference->parameters()[i].copy_(nets[0]->parameters()[i]);
    }
    const auto loss_of = [](MixedNet& net, const at::Tensor& x, const at::Tensor& y) {
      return (net.forward(x) - y).pow(2).sum() / kGlobalBatch;
    };
    std::vector<torch::optim::SGD> optimizers;
    for (const auto& net : nets)
      optimizers.emplace_back(net->parameters(), torch::optim::SGDOptions(0.1));
    torch::optim::SGD reference_sgd(reference->parameters(), torch::optim::SGDOptions(0.1));
    for (int step = 0; step < kSteps; ++step) {
      const at::Tensor x = inputs(step, torch::kFloat32), y = labels(step, torch::kFloat64);
      strategy.run([&](auto& ctx) {
        const auto local = static_cast<std::size_t>(ctx.local_replica_id());
        optimizers[local].zero_grad();
        const at::Tensor loss = loss_of(*nets[local], strata::torch::split_batch(x, ctx),
                                        strata::torch::split_batch(y, ctx));
        backward_and_step(model, ctx, optimizers[local], loss, overlapped);
      });
      reference_sgd.zero_grad();
      loss_of(*reference, x, y).backward();
      reference_sgd.step();
    }
    for (const auto& net : nets)
      for (std::size_t i = 0; i < net->parameters().size(); ++i)
        CHECK(torch::allclose(net->parameters()[i], reference->parameters()[i], 2e-5, 2e-5));
  }
}

TEST_CASE("an overlapped step refuses a second backward and a replaced gradient") {
  for (const bool set_to_none : {false, true}) {
    CAPTURE(set_to_none);
    strata::MirroredStrategy strategy({.num_replicas = 2});
    std::vector<std::shared_ptr<Net>> nets{std::make_shared<Net>(), std::make_shared<Net>()};
    strata::torch::DistributedModel model(strategy, nets);
    const at::Tensor x = inputs(0, torch::kFloat32), y = labels(0, torch::kFloat32);
    CHECK_THROWS_WITH_AS(strategy.run([&](auto& ctx) {
      Net& net = *nets[static_cast<std::size_t>(ctx.local_replica_id())];
      net.zero_grad();
      auto pending = model.begin_step(ctx);
      if (set_to_none) {
        net.zero_grad(/*set_to_none=*/true);
        loss_share(net, x, y).backward();
      } else {
        loss_share(net, x, y).backward();
        loss_share(net, x, y).backward();
      }
      pending.apply([] {});
    }),
                         doctest::Contains(set_to_none ? "was replaced" : "second gradient"),
                         strata::Error);
  }
}

TEST_CASE("DistributedModel refuses models that do not match the strategy or each other") {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  std::vector<std::shared_ptr<Net>> one{std::make_shared<Net>()};
  CHECK_THROWS_WITH_AS(strata::torch::DistributedModel(strategy, one),
                       doctest::Contains("1 models for 2 local replicas"), strata::UsageError);
  std::vector<torch::nn::Linear> different{torch::nn::Linear(3, 2), torch::nn::Linear(3, 4)};
  CHECK_THROWS_WITH_AS(strata::torch::DistributedModel(strategy, different),
                       doctest::Contains("differs in shape"), strata::UsageError);
  std::vector<torch::nn::Linear> halves{torch::nn::Linear(3, 2), torch::nn::Linear(3, 2)};
  for (auto& half : halves)
    half->to(torch::kFloat16);
  CHECK_THROWS_WITH_AS(strata::torch::DistributedModel(strategy, halves),
                       doctest::Contains("holds Half"), strata::UsageError);
}

}  // namespace
