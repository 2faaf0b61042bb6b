// tests/support/nccl_worker.cpp — a worker process for the NCCL tests (communicator/nccl_test.cpp).
//
//   strata_test_nccl_worker SCENARIO [ARGS...]   (cluster from resolve_cluster(): TF_CONFIG, ...)
//
// Each rank forms a TcpCommunicator side group of the cluster and an NcclCommunicator on CUDA
// device rank % device_count() (several ranks on one GPU need NCCL_HOSTID set per rank, which
// makes NCCL treat them as separate hosts).
// Scenarios:
//   conformance [LARGE]   every collective × op × element type × count {0, 1, 7, 1023, 65539,
//                         LARGE} (default 1048579) × root × in/out of place, staged through
//                         device memory (guards included), checked against the collective
//                         reference; prints "conformance ok: rank R of N, C cases" or
//                         "conformance failed: ..." (exit 8).
//   loop ITERATIONS COUNT  all_reduce(sum) of COUNT floats on the device, each result checked;
//                         prints "ready" after the first, "ok" at the end.
//   async COUNT           eight all_reduce_async of COUNT floats on eight buffers, then a
//                         broadcast_async, then every Work waited for; results checked.
//   abort                 rank 0 aborts from another thread while every rank waits in a
//                         collective that rank 1 never joins.
//   stall                 rank 1 sleeps instead of calling; the others all_reduce.
//   mismatch              all_reduce whose count depends on the rank (rank 1 differs).
//   bench [ITERATIONS [MAX_BYTES]]  all_reduce(sum) of floats from 8 B to MAX_BYTES (default
//                         256 MiB), ITERATIONS (default 50) times each: raw ncclAllReduce
//                         with cudaStreamSynchronize, then strata's all_reduce with the call
//                         check on and off, on the same buffers and NCCL communicator; prints
//                         one row per size (median µs of each, busbw, strata/raw ratios).
//   leak                  forms a healthy group and destroys it (NCCL loads its kernels into
//                         device memory once), measures free device memory, then forms, fails
//                         (a mismatch) and destroys three groups, and prints "leaked BYTES":
//                         how much less is free than before them.
//   train                 the demo's training loop (examples/logistic_regression.hpp) under
//                         GpuMultiWorkerMirroredStrategy, one replica per process, each
//                         replica's gradient from the example's CUDA kernel; compares the
//                         parameters with single-replica CPU training on the same global
//                         batches and prints "train ok: rank R of N, difference D" (else
//                         "train failed: ...", exit 8).
// On a strata::Error it prints "error KIND MILLISECONDS MESSAGE" and exits with 3
// (PeerFailureError), 4 (TimeoutError), 5 (MismatchError), 6 (ConfigurationError) or 7.
// Without a CUDA device it prints "no CUDA device" and exits 77.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/nccl.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/core/error.hpp>
#include <strata/resolve.hpp>
#include <strata/strategies.hpp>
#include <strata/transport/cuda/device.hpp>

#include "device_staging.hpp"
#include "gpu_gradients.hpp"
#include "logistic_regression.hpp"
#include "tcp_worker_conformance.hpp"
#include "worker_errors.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using strata::communicator::NcclCommunicator;
using strata::communicator::TcpCommunicator;
using strata::transport::cuda::DeviceBuffer;
using Nccl = NcclCommunicator<TcpCommunicator>;

Nccl form(Clock::time_point& began) {
  auto resolved = strata::resolve_cluster();
  began = Clock::now();
  TcpCommunicator side(strata::communicator::membership_of(resolved));
  const int device = side.rank() % strata::transport::cuda::device_count();
  return Nccl(std::move(side), device);
}

int conformance_scenario(std::span<const std::string_view> args, Clock::time_point& began) {
  using strata::communicator::Collective;
  const std::size_t large = args.size() == 2 ? std::stoul(std::string(args[1])) : 1048579;
  const std::size_t counts[] = {0, 1, 7, 1023, 65539, large};
  constexpr Collective kEvery[] = {Collective::all_reduce, Collective::broadcast,
                                   Collective::reduce, Collective::all_gather,
                                   Collective::reduce_scatter};
  Nccl comm = form(began);
  conformance::Totals totals;
  const auto started = Clock::now();
  conformance::run_phase(comm, "nccl", kEvery, counts, began, totals,
                         conformance::DeviceStaging{[](Nccl& nccl, auto mine, auto all) {
                           nccl.side().all_gather(mine, all);
                         }});
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (totals.failed > 0 || totals.not_identical > 0) {
    fmt::print(
        "conformance failed: rank {} of {}, {} of {} cases wrong, {} wrong elements, {} "
        "collectives not bit-identical across ranks\n",
        comm.rank(), comm.size(), totals.failed, totals.cases, totals.wrong, totals.not_identical);
    return 8;
  }
  fmt::print("conformance ok: rank {} of {}, {} cases, {:.2f} s\n", comm.rank(), comm.size(),
             totals.cases, seconds);
  return 0;
}

int loop(std::span<const std::string_view> args, Clock::time_point& began) {
  Nccl comm = form(began);
  const long iterations = std::stol(std::string(args[1]));
  const auto count = static_cast<std::size_t>(std::stol(std::string(args[2])));
  std::vector<float> host(count);
  DeviceBuffer<float> data(count);
  const float ranks = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
  for (long i = 0; i < iterations; ++i) {
    // Small integers: every partial sum is exact in float, whatever the order.
    for (std::size_t k = 0; k < count; ++k)
      host[k] = static_cast<float>((comm.rank() + 1) * ((k + static_cast<std::size_t>(i)) % 7));
    data.copy_from(host);
    began = Clock::now();
    comm.all_reduce(data.span(), strata::ReduceOp::sum);
    data.copy_to(host);
    for (std::size_t k = 0; k < count; ++k)
      if (host[k] != ranks * static_cast<float>((k + static_cast<std::size_t>(i)) % 7)) {
        fmt::print("wrong result at iteration {} index {}: {}\n", i, k, host[k]);
        return 8;
      }
    if (i == 0) {
      fmt::print("ready\n");
      std::fflush(stdout);
    }
  }
  fmt::print("ok\n");
  return 0;
}

int async_calls(std::span<const std::string_view> args, Clock::time_point& began) {
  Nccl comm = form(began);
  const auto count = static_cast<std::size_t>(std::stol(std::string(args[1])));
  constexpr int kCalls = 8;
  std::vector<DeviceBuffer<float>> buffers;
  std::vector<float> host(count);
  for (int k = 0; k < kCalls; ++k) {
    for (std::size_t i = 0; i < count; ++i)
      host[i] = static_cast<float>((comm.rank() + 1) * (k + 1) + static_cast<int>(i % 5));
    buffers.emplace_back(count).copy_from(host);
  }
  began = Clock::now();
  std::vector<strata::communicator::Work> works;
  for (int k = 0; k < kCalls; ++k)
    works.push_back(
        comm.all_reduce_async(buffers[static_cast<std::size_t>(k)].span(), strata::ReduceOp::sum));
  works.push_back(comm.broadcast_async(buffers[0].span(), comm.size() - 1));
  for (auto& work : works)
    work.wait();
  const int n = comm.size();
  for (int k = 0; k < kCalls; ++k) {
    buffers[static_cast<std::size_t>(k)].copy_to(host);
    for (std::size_t i = 0; i < count; ++i) {
      // Buffer 0 was all-reduced, then broadcast (the same on every rank).
      const float expected =
          static_cast<float>(n * (n + 1) / 2 * (k + 1) + n * static_cast<int>(i % 5));
      if (host[i] != expected) {
        fmt::print("wrong result of call {} at index {}: {}, expected {}\n", k, i, host[i],
                   expected);
        return 8;
      }
    }
  }
  fmt::print("ok\n");
  return 0;
}

int abort_scenario(Clock::time_point& began) {
  Nccl comm = form(began);
  DeviceBuffer<float> data(1 << 20);
  if (comm.rank() == 1) {
    std::this_thread::sleep_for(comm.options().timeout * 3);
    return 0;
  }
  std::jthread aborter;
  if (comm.rank() == 0)
    aborter = std::jthread([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort("the trainer is shutting down");
    });
  began = Clock::now();
  comm.all_reduce(data.span(), strata::ReduceOp::sum);
  fmt::print("ok\n");
  return 0;
}

int stall(Clock::time_point& began) {
  Nccl comm = form(began);
  DeviceBuffer<float> data(1024);
  if (comm.rank() == 1) {
    fmt::print("stalling\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(comm.options().timeout * 3);
    return 0;
  }
  began = Clock::now();
  comm.all_reduce(data.span(), strata::ReduceOp::sum);
  fmt::print("ok\n");
  return 0;
}

int mismatch(Clock::time_point& began) {
  Nccl comm = form(began);
  DeviceBuffer<float> data(comm.rank() == 1 ? 1000 : 999);
  began = Clock::now();
  comm.all_reduce(data.span(), strata::ReduceOp::sum);
  fmt::print("ok\n");
  return 0;
}

// Median of `samples` (sorted in place).
double median(std::vector<double>& samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// One size of the benchmark: medians in µs of raw NCCL, strata checked, strata unchecked.
int bench(std::span<const std::string_view> args, Clock::time_point& began) {
  const int iterations = args.size() >= 2 ? std::stoi(std::string(args[1])) : 50;
  const std::size_t largest =
      args.size() >= 3 ? std::stoul(std::string(args[2])) : std::size_t{256} << 20;
  auto resolved = strata::resolve_cluster();
  auto membership = strata::communicator::membership_of(resolved);
  began = Clock::now();
  TcpCommunicator checked_side(membership);
  membership.listen_fd = -1;  // adopted by the first side group; the second binds its own
  const int rank = checked_side.rank();
  const int size = checked_side.size();
  const int device = rank % strata::transport::cuda::device_count();
  Nccl checked(std::move(checked_side), device);
  Nccl unchecked(TcpCommunicator(membership), device,
                 strata::communicator::NcclOptions{.check_calls = false});
  (void)cudaSetDevice(device);
  DeviceBuffer<float> data(largest / sizeof(float));
  cudaStream_t stream = nullptr;
  (void)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (rank == 0)
    fmt::print(
        "# ranks {}, device {}, {} iterations per size, medians\n"
        "# {:>12} {:>12} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}\n",
        size, device, iterations, "size (B)", "count", "raw (us)", "checked", "unchecked", "busbw",
        "chk/raw", "unc/raw");
  for (std::size_t bytes = 8; bytes <= largest; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const auto span = std::span<float>(data.data(), count);
    std::vector<double> raw, with_check, without_check;
    for (int i = -5; i < iterations; ++i) {
      auto start = Clock::now();
      // The group is non-blocking: the call may return before NCCL has queued the work.
      ncclResult_t queued = ncclAllReduce(data.data(), data.data(), count, ncclFloat32, ncclSum,
                                          unchecked.native_handle(), stream);
      while (queued == ncclInProgress)
        (void)ncclCommGetAsyncError(unchecked.native_handle(), &queued);
      (void)cudaStreamSynchronize(stream);
      const double raw_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      start = Clock::now();
      checked.all_reduce(span, strata::ReduceOp::sum);
      const double checked_us =
          std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      start = Clock::now();
      unchecked.all_reduce(span, strata::ReduceOp::sum);
      const double unchecked_us =
          std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (i < 0) continue;  // warm-up
      raw.push_back(raw_us);
      with_check.push_back(checked_us);
      without_check.push_back(unchecked_us);
    }
    const double r = median(raw), c = median(with_check), u = median(without_check);
    const double busbw =
        size > 1 ? static_cast<double>(bytes) / (u * 1e3) * 2.0 * (size - 1) / size : 0.0;
    if (rank == 0)
      fmt::print("  {:>12} {:>12} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.2f} {:>8.3f} {:>8.3f}\n",
                 bytes, count, r, c, u, busbw, c / r, u / r);
  }
  (void)cudaStreamDestroy(stream);
  fmt::print("bench done: rank {}\n", rank);
  return 0;
}

// One group on `membership`: a barrier and an all_reduce whose count depends on the rank
// when `fail` (a mismatch), then destroyed.
void one_group(strata::communicator::TcpMembership membership, bool fail) {
  TcpCommunicator side(std::move(membership));
  const int device = side.rank() % strata::transport::cuda::device_count();
  Nccl comm(std::move(side), device);
  DeviceBuffer<float> data(fail && comm.rank() == 1 ? 1000 : 999);
  try {
    comm.barrier();
    comm.all_reduce(data.span(), strata::ReduceOp::sum);
  } catch (const strata::MismatchError&) {
    if (!fail) throw;
  }
}

int leak(Clock::time_point& began) {
  auto resolved = strata::resolve_cluster();
  auto membership = strata::communicator::membership_of(resolved);
  began = Clock::now();
  one_group(membership, false);
  membership.listen_fd = -1;  // adopted by the first group; later ones bind their own
  (void)cudaDeviceSynchronize();
  std::size_t free_before = 0, free_after = 0, total = 0;
  (void)cudaMemGetInfo(&free_before, &total);
  for (int round = 0; round < 3; ++round)
    one_group(membership, true);
  (void)cudaDeviceSynchronize();
  (void)cudaMemGetInfo(&free_after, &total);
  fmt::print("leaked {}\n",
             static_cast<long long>(free_before) - static_cast<long long>(free_after));
  return 0;
}

int train_scenario(Clock::time_point& began) {
  began = Clock::now();
  strata::GpuMultiWorkerMirroredStrategy strategy;
  const auto problem = example::make_problem(1024, 8);
  const example::TrainConfig config{.global_batch = 64, .epochs = 10};
  const auto result = example::train(strategy, problem, config, [](std::size_t, double) {});
  strata::OneDeviceStrategy single;
  const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
  float difference = std::abs(result.bias - reference.bias);
  for (std::size_t j = 0; j < problem.features; ++j)
    difference = std::max(difference, std::abs(result.weights[j] - reference.weights[j]));
  const int rank = strata::resolve_cluster().rank;
  const bool learned = result.epoch_losses.back() < result.epoch_losses.front();
  if (difference >= 1e-4f || !learned) {
    fmt::print(
        "train failed: rank {}, difference {:.2e} from single-replica training, loss {} "
        "-> {}\n",
        rank, difference, result.epoch_losses.front(), result.epoch_losses.back());
    return 8;
  }
  fmt::print("train ok: rank {} of {}, difference {:.2e}\n", rank, strategy.num_replicas_in_sync(),
             difference);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    fmt::print(stderr,
               "usage: strata_test_nccl_worker conformance [LARGE] | loop N COUNT | async COUNT | "
               "abort | stall | "
               "mismatch | leak | bench [ITERATIONS [MAX_BYTES]] | train\n");
    return 2;
  }
  if (strata::transport::cuda::device_count() == 0) {
    fmt::print("no CUDA device\n");
    return 77;
  }
  auto began = Clock::now();
  return strata::testing::exit_code_of(began, [&] {
    if (args[0] == "conformance" && args.size() <= 2) return conformance_scenario(args, began);
    if (args[0] == "loop" && args.size() == 3) return loop(args, began);
    if (args[0] == "stall") return stall(began);
    if (args[0] == "async" && args.size() == 2) return async_calls(args, began);
    if (args[0] == "abort") return abort_scenario(began);
    if (args[0] == "mismatch") return mismatch(began);
    if (args[0] == "leak") return leak(began);
    if (args[0] == "bench" && args.size() <= 3) return bench(args, began);
    if (args[0] == "train") return train_scenario(began);
    fmt::print(stderr, "unknown scenario\n");
    return 2;
  });
}
