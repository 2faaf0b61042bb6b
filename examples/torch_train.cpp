// examples/torch_train.cpp — a libtorch trainer (a small MLP, torch::optim::SGD with momentum)
// made multi-worker by strata. The lines that end in `// strata` are all it adds to the
// single-process trainer, which `train_single_process` below keeps for comparison (one replica
// per process; strata/torch.hpp's DistributedModel also takes a model per local replica).
//
//   build/dev/tools/launch/strata-launch -n 2 -- build/dev/examples/strata_example_torch_train
//
// Every worker then checks its parameters against single-process training on the same global
// batches and exits 1 if they differ by more than float rounding.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include <torch/torch.h>

#include <strata/strategies.hpp>  // strata
#include <strata/torch.hpp>       // strata

namespace {

constexpr int kSteps = 40;
constexpr int kGlobalBatch = 96;

struct Net : torch::nn::Module {
  Net()
      : hidden(register_module("hidden", torch::nn::Linear(4, 16))),
        out(register_module("out", torch::nn::Linear(16, 1))) {}
  at::Tensor forward(const at::Tensor& x) { return out(torch::tanh(hidden(x))); }
  torch::nn::Linear hidden, out;
};

// Step `step`'s global batch: points in [-1, 1]^4 and a smooth target of them.
at::Tensor inputs(int step) {
  torch::Generator generator = at::detail::createCPUGenerator(1000 + static_cast<unsigned>(step));
  return torch::rand({kGlobalBatch, 4}, generator) * 2 - 1;
}
at::Tensor labels(const at::Tensor& x) {
  return torch::sin(x.sum(1, /*keepdim=*/true)) + 0.5 * x.narrow(1, 0, 1);
}

// The mean squared error of a part of the global batch, as a share of the whole batch's: summed
// over the part and divided by the global batch, so that the shares add up to the batch's loss.
at::Tensor loss_share(Net& net, const at::Tensor& x, const at::Tensor& y) {
  return (net.forward(x) - y).pow(2).sum() / kGlobalBatch;
}

std::shared_ptr<Net> make_net() {
  torch::manual_seed(7);
  return std::make_shared<Net>();
}
torch::optim::SGD make_optimizer(Net& net) {
  return torch::optim::SGD(net.parameters(), torch::optim::SGDOptions(0.2).momentum(0.9));
}

// The trainer as it was: one process, the whole global batch every step.
std::shared_ptr<Net> train_single_process() {
  auto net = make_net();
  auto optimizer = make_optimizer(*net);
  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor x = inputs(step), y = labels(x);
    optimizer.zero_grad();
    loss_share(*net, x, y).backward();
    optimizer.step();
  }
  return net;
}

}  // namespace

int main() {
  // [snippet:loop]
  strata::MultiWorkerMirroredStrategy strategy;  // strata
  auto net = make_net();
  auto optimizer = make_optimizer(*net);
  // Gradients are summed: each replica's loss is already its share of the batch's.
  strata::torch::DistributedModel model(strategy, net,                                 // strata
                                        strata::placement::VariableAggregation::sum);  // strata

  for (int step = 0; step < kSteps; ++step) {
    const at::Tensor x = inputs(step), y = labels(x);
    // [snippet:step]
    const auto losses = strategy.run([&](auto& ctx) {  // strata
      optimizer.zero_grad();
      auto pending = model.begin_step(ctx);                                         // strata
      const at::Tensor loss = loss_share(*net, strata::torch::split_batch(x, ctx),  // strata
                                         strata::torch::split_batch(y, ctx));       // strata
      loss.backward();
      pending.apply([&] { optimizer.step(); });  // strata
      return loss.item<double>();                // strata
    });                                          // strata
    // [end-snippet:step]
    const double loss = strategy.reduce(strata::ReduceOp::sum, losses);  // strata
    if (strategy.is_chief() && (step % 10 == 0 || step == kSteps - 1))   // strata
      std::printf("step %2d  loss %.6f\n", step, loss);
  }
  // [end-snippet:loop]

  // The check: this worker's parameters against single-process training.
  const auto reference = train_single_process();
  double worst = 0;
  for (std::size_t i = 0; i < net->parameters().size(); ++i) {
    const at::Tensor difference = (net->parameters()[i] - reference->parameters()[i]).abs().max();
    worst = std::max(worst, difference.item<double>());
  }
  const bool same = worst <= 1e-4;
  std::printf("worker %d of %d: %s single-process training (largest difference %.2e)\n",
              strategy.worker_id(), strategy.num_workers(), same ? "matches" : "DIFFERS FROM",
              worst);
  return same ? 0 : 1;
}
