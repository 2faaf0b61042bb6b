// Tests of the GPU strategies (strategies.hpp: GpuMirroredStrategy, GpuCentralStorageStrategy,
// and GpuMirrored over ReduceToOneDevice) on a GPU:
//   - the example's training loop (examples/logistic_regression.hpp), gradients computed by its
//     CUDA kernel, reaches the solution and the parameters of single-replica CPU training;
//   - the same gradients give the same bits on GPU replicas as on CPU replicas (MirroredStrategy)
//     for every optimizer: reductions and updates round as the host's do;
//   - mirrored copies stay identical; assignment in replica context; the default of one replica
//     per GPU; more NCCL replicas than GPUs is a usage error;
//   - sync::LocalSgd on GPU copies gives the CPU copies' bits.
// Without a CUDA device the test is skipped (exit 77).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/config.hpp>

#if STRATA_HAS_CUDA
#include <unistd.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/strata.hpp>

#include "gpu_gradients.hpp"
#include "logistic_regression.hpp"
#endif

namespace {

[[noreturn]] void skip(const char* reason) {
  std::fprintf(stderr, "skipped: %s\n", reason);
  std::exit(77);  // NOLINT(concurrency-mt-unsafe)
}

#if STRATA_HAS_CUDA

using strata::transport::cuda::DeviceBuffer;
using GpuMirroredReduceToOne =
    strata::Strategy<strata::placement::GpuMirrored, strata::communicator::ReduceToOneDevice,
                     strata::sync::Synchronous>;
// Local SGD on GPU copies and on CPU copies, averaged every second update.
using GpuLocalSgd =
    strata::Strategy<strata::placement::GpuMirrored, strata::communicator::ReduceToOneDevice,
                     strata::sync::LocalSgd<2>>;
using CpuLocalSgd =
    strata::Strategy<strata::placement::Mirrored, strata::communicator::LocalCommunicator<>,
                     strata::sync::LocalSgd<2>>;

void need_a_device() {
  if (strata::transport::cuda::device_count() == 0) skip("no CUDA device");
}

// Trains the example with `Strategy` and checks it against single-replica CPU training.
template <class Strategy>
void check_training(int replicas) {
  CAPTURE(replicas);
  const auto problem = example::make_problem(1024, 8);
  const example::TrainConfig config{.global_batch = 64, .epochs = 20};
  Strategy strategy({.num_replicas = replicas});
  REQUIRE(strategy.num_replicas_in_sync() == replicas);
  const auto result = example::train(strategy, problem, config, [](std::size_t, double) {});
  strata::OneDeviceStrategy single;
  const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
  for (std::size_t j = 0; j < problem.features; ++j) {
    CAPTURE(j);
    CHECK(std::abs(result.weights[j] - problem.true_weights[j]) < 1e-2f);
    CHECK(std::abs(result.weights[j] - reference.weights[j]) < 1e-4f);
  }
  CHECK(std::abs(result.bias - reference.bias) < 1e-4f);
  CHECK(result.epoch_losses.back() < result.epoch_losses.front());
}

// The gradient of replica r at step s, element i: the same on CPU and GPU replicas.
template <class T>
std::vector<T> gradient_of(int replica, int step, std::size_t n) {
  std::vector<T> g(n);
  for (std::size_t i = 0; i < n; ++i)
    g[i] = static_cast<T>(std::sin(0.37 * double(i) + 1.3 * replica + 0.11 * step) * 0.5);
  return g;
}

// Five updates of `optimizer` with the same per-replica gradients under a CPU and a GPU
// strategy; returns both models (replica 0's copy).
template <class GpuStrategy, class T, class CpuStrategy = strata::MirroredStrategy, class O>
std::pair<std::vector<T>, std::vector<T>> cpu_and_gpu(const O& optimizer, int replicas,
                                                      std::size_t n) {
  std::vector<T> initial(n);
  for (std::size_t i = 0; i < n; ++i)
    initial[i] = static_cast<T>(0.01 * double(i % 97) - 0.3);
  CpuStrategy cpu({.num_replicas = replicas});
  auto cpu_w = cpu.template create_variable<T>(initial);
  GpuStrategy gpu({.num_replicas = replicas});
  auto gpu_w = gpu.template create_variable<T>(initial);
  for (int step = 0; step < 5; ++step) {
    cpu.run([&](auto& replica) {
      auto g = gradient_of<T>(replica.replica_id_in_sync_group(), step, n);
      replica.apply_gradients(optimizer, std::span(g), cpu_w);
    });
    gpu.run([&](auto& replica) {
      const auto host = gradient_of<T>(replica.replica_id_in_sync_group(), step, n);
      DeviceBuffer<T> g(n);
      g.copy_from(std::span<const T>(host));
      replica.apply_gradients(optimizer, g.span(), gpu_w);
    });
  }
  const auto gpu_values = gpu_w.read();
  return {std::vector<T>(cpu_w.read().begin(), cpu_w.read().end()),
          std::vector<T>(gpu_values.begin(), gpu_values.end())};
}

template <class T>
void check_same_bits(const std::vector<T>& cpu, const std::vector<T>& gpu) {
  REQUIRE(cpu.size() == gpu.size());
  std::size_t different = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i)
    different += cpu[i] != gpu[i] ? 1 : 0;
  CHECK(different == 0);
}

#endif

}  // namespace

#if STRATA_HAS_CUDA

TEST_CASE("GpuCentralStorageStrategy trains the example to the single-replica result") {
  need_a_device();
  for (int replicas : {1, 2, 3})
    check_training<strata::GpuCentralStorageStrategy>(replicas);
}

TEST_CASE("GpuMirrored over ReduceToOneDevice trains the example, several replicas per GPU") {
  need_a_device();
  for (int replicas : {1, 3})
    check_training<GpuMirroredReduceToOne>(replicas);
}

#if STRATA_HAS_NCCL
TEST_CASE("GpuMirroredStrategy (NCCL) trains the example with one replica per GPU") {
  need_a_device();
  const int gpus = strata::transport::cuda::device_count();
  check_training<strata::GpuMirroredStrategy>(gpus);
  strata::GpuMirroredStrategy by_default;
  CHECK(by_default.num_replicas_in_sync() == gpus);
  CHECK_THROWS_AS(strata::GpuMirroredStrategy({.num_replicas = gpus + 1}), strata::UsageError);
}
#endif

TEST_CASE("GPU replicas compute the same bits as CPU replicas, for every optimizer") {
  need_a_device();
  constexpr std::size_t kN = 10007;
  for (int replicas : {1, 3}) {
    CAPTURE(replicas);
    {
      const auto [cpu, gpu] =
          cpu_and_gpu<GpuMirroredReduceToOne, float>(strata::optim::Sgd{0.1}, replicas, kN);
      check_same_bits(cpu, gpu);
    }
    {
      const auto [cpu, gpu] = cpu_and_gpu<GpuMirroredReduceToOne, double>(
          strata::optim::Momentum{.learning_rate = 0.05, .momentum = 0.9}, replicas, kN);
      check_same_bits(cpu, gpu);
    }
    {
      const auto [cpu, gpu] = cpu_and_gpu<GpuMirroredReduceToOne, float>(
          strata::optim::Momentum{.learning_rate = 0.05, .momentum = 0.8, .nesterov = true},
          replicas, kN);
      check_same_bits(cpu, gpu);
    }
    {
      const auto [cpu, gpu] = cpu_and_gpu<GpuMirroredReduceToOne, float>(
          strata::optim::Adam{.learning_rate = 0.01}, replicas, kN);
      check_same_bits(cpu, gpu);
    }
    {
      const auto [cpu, gpu] = cpu_and_gpu<strata::GpuCentralStorageStrategy, double>(
          strata::optim::Adam{.learning_rate = 0.01}, replicas, kN);
      check_same_bits(cpu, gpu);
    }
  }
}

TEST_CASE("LocalSgd on GPU copies computes the CPU copies' bits; summed gradients are refused") {
  need_a_device();
  // Five updates: two averagings, then a step of each replica alone.
  const auto [cpu, gpu] = cpu_and_gpu<GpuLocalSgd, float, CpuLocalSgd>(
      strata::optim::Momentum{.learning_rate = 0.1f, .momentum = 0.9f}, 3, 1000);
  check_same_bits(cpu, gpu);
  GpuLocalSgd strategy({.num_replicas = 2});
  // The list form averages each variable on its own on device memory.
  auto a = strategy.create_variable<float>(std::vector<float>(3, 1.0f));
  auto b = strategy.create_variable<float>(std::vector<float>(2, 1.0f));
  for (int step = 0; step < 2; ++step)
    strategy.run([&](auto& replica) {
      const float value = float(replica.replica_id_in_sync_group() + 1);  // 1, 2
      DeviceBuffer<float> ga(3);
      DeviceBuffer<float> gb(2);
      ga.copy_from(std::span<const float>(std::vector<float>(3, value)));
      gb.copy_from(std::span<const float>(std::vector<float>(2, value)));
      replica.apply_gradients(strata::optim::Sgd{1.0f}, {strata::gradient_for(a, ga.span()),
                                                         strata::gradient_for(b, gb.span())});
    });
  // Each copy stepped twice by its replica's gradient, then the copies were averaged.
  CHECK(a.read()[0] == -2.0f);
  CHECK(b.read()[1] == -2.0f);
  auto w = strategy.create_variable<float>(std::vector<float>(4, 1.0f),
                                           strata::placement::VariableAggregation::sum);
  CHECK_THROWS_AS(strategy.run([&](auto& replica) {
    DeviceBuffer<float> g(4);
    g.copy_from(std::span<const float>(std::vector<float>(4, 1.0f)));
    replica.apply_gradients(strata::optim::Sgd{}, g.span(), w);
  }),
                  strata::UsageError);
}

TEST_CASE("mirrored GPU copies stay identical; assignment in replica context and from the host") {
  need_a_device();
  GpuMirroredReduceToOne strategy({.num_replicas = 3});
  std::vector<float> initial(513, 1.0f);
  auto w = strategy.create_variable<float>(initial, strata::placement::VariableAggregation::sum);
  strategy.run([&](auto& replica) {
    std::vector<float> value(513, float(replica.replica_id_in_sync_group() + 1));
    DeviceBuffer<float> device(513);
    device.copy_from(std::span<const float>(value));
    replica.assign(w, std::span<const float>(device.span()));
  });
  for (std::size_t copy = 0; copy < w.num_copies(); ++copy) {
    std::vector<float> values(513);
    strata::transport::cuda::DeviceScope scope(w.device(copy), -1, "test");
    const std::span<float> view = w.copy(copy);
    CHECK(cudaMemcpy(values.data(), view.data(), view.size_bytes(), cudaMemcpyDefault) ==
          cudaSuccess);
    for (const float v : values)
      REQUIRE(v == 6.0f);  // 1 + 2 + 3
  }
  std::vector<float> twos(513, 2.0f);
  w.assign(twos);
  CHECK(w.read() == twos);
  CHECK_THROWS_AS(w.assign(std::vector<float>(3, 0.0f)), strata::UsageError);
}

TEST_CASE("one variable, one optimizer: a second optimizer with other slots is a usage error") {
  need_a_device();
  GpuMirroredReduceToOne strategy({.num_replicas = 1});
  auto w = strategy.create_variable<float>(std::vector<float>(8, 0.0f));
  DeviceBuffer<float> g(8);
  g.copy_from(std::vector<float>(8, 1.0f));
  strategy.run([&](auto& replica) { replica.apply_gradients(strata::optim::Adam{}, g.span(), w); });
  CHECK_THROWS_AS(strategy.run([&](auto& replica) {
    replica.apply_gradients(strata::optim::Momentum{}, g.span(), w);
  }),
                  strata::UsageError);
}

TEST_CASE("a GPU variable's optimizer state goes into a checkpoint and training continues") {
  // Adam on 2 GPU replicas: 3 steps, a checkpoint, 3 more; a new strategy restores it and
  // takes the same 3 steps to the same bits, and a host variable restores the same slots.
  need_a_device();
  constexpr std::size_t kN = 1031;
  const strata::optim::Adam adam{.learning_rate = 0.01};
  std::vector<float> host_gradient(kN);
  for (std::size_t i = 0; i < kN; ++i)
    host_gradient[i] = static_cast<float>(static_cast<int>(i % 17) - 8) / 8.0f;
  DeviceBuffer<float> g(kN);
  g.copy_from(std::span<const float>(host_gradient));
  const auto steps = [&](GpuMirroredReduceToOne& strategy, auto& w, int count) {
    for (int step = 0; step < count; ++step)
      strategy.run([&](auto& replica) { replica.apply_gradients(adam, g.span(), w); });
  };
  const auto file = std::filesystem::temp_directory_path() /
                    ("strata_gpu_state_" + std::to_string(::getpid()) + ".safetensors");
  GpuMirroredReduceToOne first({.num_replicas = 2});
  auto w = first.create_variable<float>(std::vector<float>(kN, 0.5f));
  steps(first, w, 3);
  strata::checkpoint::Checkpoint saved;
  saved.track("w", w);
  saved.save(file);
  steps(first, w, 3);

  GpuMirroredReduceToOne second({.num_replicas = 2});
  auto restored = second.create_variable<float>(std::vector<float>(kN, 0.0f));
  strata::checkpoint::Checkpoint checkpoint;
  checkpoint.track("w", restored);
  checkpoint.restore(file);
  steps(second, restored, 3);
  CHECK(restored.read() == w.read());

  strata::placement::Variable<float> host(1, std::vector<float>(kN, 0.0f),
                                          strata::placement::VariableAggregation::sum);
  strata::checkpoint::Checkpoint on_host;
  on_host.track("w", host);
  on_host.restore(file);
  strata::optim::OptimizerState<float> gathered;
  REQUIRE(restored.read_optimizer_state(gathered) == 2u);
  REQUIRE(host.optimizer_state(0) != nullptr);
  CHECK(host.optimizer_state(0)->step == 3);
  CHECK(gathered.step == 6);
  std::filesystem::remove(file);
}

#else

TEST_CASE("built without CUDA") {
  skip("strata was built without CUDA (STRATA_HAS_CUDA=0)");
}

#endif
