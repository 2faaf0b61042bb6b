// examples/logistic_regression.hpp — one training loop, written once, for every strategy.
//
// Logistic regression on synthetic data whose solution is known: targets are the soft labels
// y = sigmoid(x·w* + b*), so the cross-entropy loss is minimised exactly at (w*, b*) and every
// example's gradient vanishes there — mini-batch SGD converges to (w*, b*) itself.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include <strata/strata.hpp>

namespace example {

struct Problem {
  std::size_t features = 0;
  std::vector<float> inputs;   // examples × features, row-major
  std::vector<float> targets;  // soft labels in (0, 1)
  std::vector<float> true_weights;
  float true_bias = 0;

  std::size_t examples() const { return targets.size(); }
  std::span<const float> row(std::size_t example) const {
    return std::span(inputs).subspan(example * features, features);
  }
};

inline float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}

/// A deterministic problem: inputs uniform in [-1, 1) from a fixed generator (SplitMix64), a
/// known weight vector alternating in sign, bias 0.25.
inline Problem make_problem(std::size_t examples, std::size_t features, std::uint64_t seed = 7) {
  Problem problem;
  problem.features = features;
  problem.true_bias = 0.25f;
  for (std::size_t j = 0; j < features; ++j)
    problem.true_weights.push_back((j % 2 == 0 ? 1.0f : -1.0f) * (0.5f + 0.25f * float(j % 3)));
  std::uint64_t state = seed;
  auto uniform = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return float(z >> 40) * 0x1p-24f * 2.0f - 1.0f;
  };
  problem.inputs.resize(examples * features);
  for (auto& x : problem.inputs)
    x = uniform();
  for (std::size_t i = 0; i < examples; ++i) {
    float z = problem.true_bias;
    for (std::size_t j = 0; j < features; ++j)
      z += problem.row(i)[j] * problem.true_weights[j];
    problem.targets.push_back(sigmoid(z));
  }
  return problem;
}

struct TrainConfig {
  std::size_t global_batch = 64;
  std::size_t epochs = 30;
  double learning_rate = 4.0;
  std::uint64_t shuffle_seed = 42;
  std::filesystem::path checkpoint_dir = {};  // empty: no checkpoints
  std::size_t checkpoint_every = 0;           // steps between checkpoints (0: at the end only)
};

struct TrainResult {
  std::vector<float> weights;
  float bias = 0;
  std::vector<double> epoch_losses;          // mean cross-entropy over each epoch's steps
  std::optional<std::int64_t> resumed_from;  // the checkpoint's step, when one was restored
};

/// One replica's gradient and loss on the host: the examples `rows` of its slice of the batch,
/// each gradient scaled by `scale` (1 / global batch). Returns the replica's share of the loss.
inline float host_gradients(const Problem& problem, std::span<const std::size_t> rows,
                            std::span<const float> weights, float bias, float scale,
                            std::span<float> grad_w, std::span<float> grad_b) {
  const std::size_t d = problem.features;
  std::fill(grad_w.begin(), grad_w.end(), 0.0f);
  grad_b[0] = 0.0f;
  float loss = 0;
  for (const std::size_t row : rows) {
    const auto x = problem.row(row);
    const float y = problem.targets[row];
    float z = bias;
    for (std::size_t j = 0; j < d; ++j)
      z += x[j] * weights[j];
    const float p = sigmoid(z);
    loss -= y * std::log(p) + (1 - y) * std::log(1 - p);
    for (std::size_t j = 0; j < d; ++j)
      grad_w[j] += (p - y) * x[j];
    grad_b[0] += p - y;
  }
  for (auto& g : grad_w)
    g *= scale;
  grad_b[0] *= scale;
  return loss * scale;
}

/// Where a replica's gradients live and how they are computed: host buffers for the CPU
/// strategies (gpu_gradients.hpp has the GPU's).
class HostWorkspace {
 public:
  HostWorkspace(const Problem& problem, int /*local_replica*/)
      : problem_(&problem), grad_w_(problem.features), grad_b_(1) {}

  float gradients(std::span<const std::size_t> rows, std::span<const float> weights,
                  std::span<const float> bias, float scale) {
    return host_gradients(*problem_, rows, weights, bias[0], scale, grad_w_, grad_b_);
  }
  std::span<float> grad_w() { return grad_w_; }
  std::span<float> grad_b() { return grad_b_; }

 private:
  const Problem* problem_;
  std::vector<float> grad_w_, grad_b_;
};

template <class Strategy>
struct WorkspaceOf {
  using type = HostWorkspace;
};

// [snippet:usage]
/// Trains on `problem` with any strategy: the loop does not know which one it runs on.
template <class Strategy, class OnEpoch>
TrainResult train(Strategy& strategy, const Problem& problem, const TrainConfig& config,
                  OnEpoch on_epoch) {
  using strata::placement::VariableAggregation;
  const std::size_t d = problem.features;
  // Gradients are summed over replicas, each scaled by 1/global_batch: exactly the
  // single-replica gradient of the global batch, however the batch is split.
  auto w = strategy.template create_variable<float>(std::vector<float>(d, 0.0f),
                                                    VariableAggregation::sum);
  auto b = strategy.template create_variable<float>(std::vector<float>(1, 0.0f),
                                                    VariableAggregation::sum);
  const strata::optim::Sgd sgd{config.learning_rate};
  const strata::data::EpochSampler sampler({.num_examples = problem.examples(),
                                            .global_batch = config.global_batch,
                                            .seed = config.shuffle_seed,
                                            .shuffle = true,
                                            .drop_remainder = false});

  // Each replica's gradient buffers, where its strategy computes (host or GPU).
  std::vector<typename WorkspaceOf<Strategy>::type> workspaces;
  for (int r = 0; r < strategy.num_local_replicas(); ++r)
    workspaces.emplace_back(problem, r);

  // Everything a resumed run needs to continue exactly where this one stopped. The chief
  // writes checkpoints; every worker restores the latest when it starts.
  TrainResult result;
  std::int64_t global_step = 0;
  strata::data::SamplerPosition position;
  double loss_sum = 0;  // of the current epoch's steps so far
  strata::checkpoint::Checkpoint checkpoint;
  // Asynchronous workers do not wait for each other: one that restored late would set the
  // servers' variables back under the others' updates, so only the chief restores them there.
  // Copies a worker holds itself (Mirrored, under every sync policy) are restored everywhere.
  constexpr bool kOnServers =
      Strategy::placement_type::kUpdateSite == strata::placement::UpdateSite::servers;
  if (!kOnServers || Strategy::sync_type::kWaitsForAllReplicas || strategy.is_chief()) {
    checkpoint.track("w", w);
    checkpoint.track("b", b);
  }
  checkpoint.track("global_step", global_step);
  checkpoint.track("input", sampler, position);
  checkpoint.track("epoch_loss_sum", std::span(&loss_sum, 1));
  std::optional<strata::checkpoint::CheckpointManager> checkpoints;
  if (!config.checkpoint_dir.empty()) {
    checkpoints.emplace(config.checkpoint_dir, 3);
    result.resumed_from = checkpoints->restore_latest(checkpoint);
  }

  while (position.epoch < config.epochs && sampler.steps_per_epoch() > 0) {
    const auto batch = sampler.global_batch_indices(position.epoch, position.step);
    // [snippet:step]
    auto losses = strategy.run([&](auto& replica) {
      const auto mine = strata::data::split_batch(batch.size(), replica.replica_id_in_sync_group(),
                                                  replica.num_replicas_in_sync());
      auto& workspace = workspaces[static_cast<std::size_t>(replica.local_replica_id())];
      const float loss =
          workspace.gradients(std::span(batch).subspan(mine.offset, mine.size), replica.read(w),
                              replica.read(b), 1.0f / float(batch.size()));
      // Both gradients in one call: all-reduced together, in fused buckets.
      replica.apply_gradients(sgd, {strata::gradient_for(w, workspace.grad_w()),
                                    strata::gradient_for(b, workspace.grad_b())});
      return loss;  // this replica's share of the batch's mean loss
    });
    loss_sum += strategy.reduce(strata::ReduceOp::sum, losses);
    // [end-snippet:step]
    ++global_step;
    if (position.step + 1 == sampler.steps_per_epoch()) {
      result.epoch_losses.push_back(loss_sum / double(sampler.steps_per_epoch()));
      on_epoch(position.epoch, result.epoch_losses.back());
      loss_sum = 0;
    }
    position = sampler.next(position);
    const bool due = config.checkpoint_every > 0 &&
                     global_step % static_cast<std::int64_t>(config.checkpoint_every) == 0;
    if (checkpoints && strategy.is_chief() && (due || position.epoch == config.epochs))
      checkpoints->save(checkpoint, global_step);
  }
  const auto weights = w.read();  // a host copy for GPU strategies
  result.weights.assign(weights.begin(), weights.end());
  result.bias = b.read()[0];
  return result;
}
// [end-snippet:usage]

}  // namespace example
