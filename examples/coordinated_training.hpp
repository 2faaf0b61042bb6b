// examples/coordinated_training.hpp — the example problem trained under a ClusterCoordinator
// (TF2's model): the chief creates the variables on the ps tasks and schedules one function per
// global batch; whichever worker is free runs it with its own ParameterServerStrategy, against
// the same variables. A worker that dies loses its step to another; one that restarts rejoins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/strategies.hpp>

#include "logistic_regression.hpp"

namespace example {

/// A worker's resource: its strategy, the model's variables (the chief's, found by name on the
/// ps tasks) and the data, from which it runs any global batch asked of it.
class StepRunner {
 public:
  StepRunner(const Problem& problem, const TrainConfig& config)
      : problem_(problem),
        config_(config),
        w_(strategy_.create_variable<float>(std::vector<float>(problem.features, 0.0f),
                                            strata::placement::VariableAggregation::sum)),
        b_(strategy_.create_variable<float>(std::vector<float>(1, 0.0f),
                                            strata::placement::VariableAggregation::sum)),
        sampler_({.num_examples = problem.examples(),
                  .global_batch = config.global_batch,
                  .seed = config.shuffle_seed,
                  .shuffle = true,
                  .drop_remainder = false}) {
    for (int r = 0; r < strategy_.num_local_replicas(); ++r)
      workspaces_.emplace_back(problem_, r);
  }

  /// One SGD step on global batch `step` of `epoch`, split over this worker's replicas (the
  /// whole batch is this function's: other workers run other batches); its mean loss.
  double step(std::size_t epoch, std::size_t step) {
    const auto batch = sampler_.global_batch_indices(epoch, step);
    const strata::optim::Sgd sgd{config_.learning_rate};
    auto losses = strategy_.run([&](auto& replica) {
      const auto mine = strata::data::split_batch(batch.size(), replica.local_replica_id(),
                                                  strategy_.num_local_replicas());
      auto& workspace = workspaces_[static_cast<std::size_t>(replica.local_replica_id())];
      const float loss =
          workspace.gradients(std::span(batch).subspan(mine.offset, mine.size), replica.read(w_),
                              replica.read(b_), 1.0f / float(batch.size()));
      replica.apply_gradients(sgd, workspace.grad_w(), w_);
      replica.apply_gradients(sgd, workspace.grad_b(), b_);
      return loss;
    });
    return strategy_.reduce(strata::ReduceOp::sum, losses);
  }

  std::size_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }

 private:
  using Variable =
      decltype(std::declval<const strata::ParameterServerStrategy&>().create_variable<float>(
          std::span<const float>{}));
  strata::ParameterServerStrategy strategy_;
  Problem problem_;
  TrainConfig config_;
  Variable w_;
  Variable b_;
  strata::data::EpochSampler sampler_;
  std::vector<HostWorkspace> workspaces_;
};

/// The functions every task registers, the same way.
struct TrainingFunctions {
  strata::coordinator::Functions registry;
  /// Builds a worker's StepRunner from (examples, features, learning rate, global batch).
  strata::coordinator::ResourceFunction<std::unique_ptr<StepRunner>, std::uint64_t, std::uint64_t,
                                        double, std::uint64_t>
      runner;
  /// Runs (epoch, step) on the worker's runner; returns the batch's mean loss.
  strata::coordinator::Function<double, strata::coordinator::PerWorker<std::unique_ptr<StepRunner>>,
                                std::uint64_t, std::uint64_t>
      step;
};

inline TrainingFunctions register_training() {
  strata::coordinator::Functions registry;
  auto runner = registry.add_resource(
      "example.runner", [](strata::coordinator::Worker&, std::uint64_t examples,
                           std::uint64_t features, double learning_rate, std::uint64_t batch) {
        TrainConfig config;
        config.learning_rate = learning_rate;
        config.global_batch = batch;
        return std::make_unique<StepRunner>(make_problem(examples, features), config);
      });
  auto step = registry.add(
      "example.step",
      [](strata::coordinator::Worker& worker,
         strata::coordinator::PerWorker<std::unique_ptr<StepRunner>> runner, std::uint64_t epoch,
         std::uint64_t step) { return worker.get(runner)->step(epoch, step); });
  return {std::move(registry), std::move(runner), std::move(step)};
}

/// The chief's side: creates the variables, schedules every step of every epoch (at the
/// learning rate divided by the number of workers) and waits for each epoch (`on_epoch(epoch, mean
/// loss)`), then reads the model back from the ps tasks.
/// `report`, when given, receives what the coordinator did.
template <class OnEpoch>
TrainResult train_coordinated(const TrainingFunctions& functions, const Problem& problem,
                              const TrainConfig& config, OnEpoch on_epoch,
                              strata::coordinator::CoordinatorOptions options = {},
                              strata::coordinator::CoordinatorReport* report = nullptr) {
  strata::ParameterServerStrategy strategy;  // creates (initializes) the variables first
  auto w = strategy.create_variable<float>(std::vector<float>(problem.features, 0.0f),
                                           strata::placement::VariableAggregation::sum);
  auto b = strategy.create_variable<float>(std::vector<float>(1, 0.0f),
                                           strata::placement::VariableAggregation::sum);
  const strata::data::EpochSampler sampler({.num_examples = problem.examples(),
                                            .global_batch = config.global_batch,
                                            .seed = config.shuffle_seed,
                                            .shuffle = true,
                                            .drop_remainder = false});
  strata::coordinator::ClusterCoordinator coordinator(std::move(options));
  // W workers apply steps computed on values up to W - 1 steps old; dividing the rate by W
  // (staleness-aware asynchronous SGD) keeps the demo's rate, tuned for synchronous steps,
  // converging.
  const double learning_rate = config.learning_rate / coordinator.num_workers();
  const auto runner = coordinator.create_per_worker(
      functions.runner, std::uint64_t{problem.examples()}, std::uint64_t{problem.features},
      learning_rate, std::uint64_t{config.global_batch});
  TrainResult result;
  for (std::size_t epoch = 0; epoch < config.epochs; ++epoch) {
    std::vector<strata::coordinator::RemoteValue<double>> losses;
    for (std::size_t step = 0; step < sampler.steps_per_epoch(); ++step)
      losses.push_back(
          coordinator.schedule(functions.step, runner, std::uint64_t{epoch}, std::uint64_t{step}));
    coordinator.join();
    double sum = 0;
    for (const auto& loss : losses)
      sum += loss.fetch();
    result.epoch_losses.push_back(sum / double(losses.size()));
    on_epoch(epoch, result.epoch_losses.back());
  }
  coordinator.shutdown();
  if (report != nullptr) *report = coordinator.report();
  const auto weights = w.read();
  result.weights.assign(weights.begin(), weights.end());
  result.bias = b.read()[0];
  return result;
}

}  // namespace example
