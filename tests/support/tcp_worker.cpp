// tests/support/tcp_worker.cpp — a worker process for the multi-process TCP tests.
//
//   strata_test_tcp_worker SCENARIO [ARGS...]      (cluster from resolve_cluster(): TF_CONFIG, ...)
//
// Scenarios:
//   loop ITERATIONS COUNT   all_reduce(sum) of COUNT floats ITERATIONS times, each result
//                           checked against the value every rank can compute; prints
//                           "ready" after the first iteration, "ok" at the end.
//   loop ITERATIONS COUNT lend   the same, lending every message of 64 KiB or more
//                           (TcpOptions::lend_from_bytes = 0).
//   mismatch                all_reduce whose count depends on the rank (rank 1 differs).
//   join                    forms the group, runs a barrier.
//   train K EPOCHS          trains examples/logistic_regression.hpp with
//                           MultiWorkerMirroredStrategy (K local replicas) and with
//                           OneDeviceStrategy; prints "replicas N", "drift D" (largest
//                           parameter difference) and "params" with the exact bits.
//   train K EPOCHS local-sgd   the same under sync::LocalSgd<1> (copies averaged every step).
//   raise K WORKER          MultiWorkerMirroredStrategy (K local replicas) running steps of
//                           all-reduces; in step 3 the last replica of worker WORKER throws
//                           std::runtime_error("loss is NaN at step 3").
//   ps-train K EPOCHS [3]   the same program on every task of a parameter-server cluster: ps
//                           tasks serve (serve_if_ps) and print "served"; workers train with
//                           ParameterServerStrategy (K replicas; with 3, variables split in three
//                           and placed greedily) and print "error E" (largest distance from the
//                           known solution), "params" and "single" (OneDeviceStrategy's) bits.
//   ps-train K EPOCHS sync  the same with sync::Synchronous (TF1's SyncReplicasOptimizer); also
//                           prints "drift D" from single-process training.
//   ps-ssp 0|2|async|backup0|backup1 STEPS SLOW_WORKER SLOW_MS   BoundedStaleness<0|2> (or
//                           Asynchronous, or SynchronousWithBackups<0|1>) on two variables
//                           pushed in one apply_gradients, replica SLOW_WORKER sleeping SLOW_MS
//                           before each push; prints "start N T", "push N T" and "applied N T"
//                           (steady_clock ns) per step.
//   ps-train K EPOCHS backup   ps-train under SynchronousWithBackups<1>.
//   conformance [LARGE]     every collective × op × element type × count {0, 1, 7, 1023, LARGE}
//                           (default 65539) × root × in/out of place, checking this rank's
//                           outputs against the one collective reference (tools/reference/);
//                           all_reduce once per all-reduce algorithm (a communicator each, formed
//                           in turn on the same addresses). Prints the first 20 wrong elements as
//                           "wrong: rank R, ...", then "conformance ok: rank R of N, C cases"
//                           or "conformance failed: ..." (exit 8).
// STRATA_TEST_SHARED_MEMORY=0 keeps the co-located ranks of `join`, `mismatch` and `loop` on
// TCP (TcpOptions::shared_memory = false); those scenarios print "transport shm" or
// "transport tcp" once the group has formed.
// On a strata::Error it prints "error KIND MILLISECONDS MESSAGE" (time since the error's call
// began) and exits with 3 (PeerFailureError), 4 (TimeoutError), 5 (MismatchError),
// 6 (ConfigurationError) or 7 (other); a wrong result exits 8.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <strata/resolve.hpp>
#include <strata/serve_if_ps.hpp>
#include <strata/strategies.hpp>

#include <strata/communicator/tcp.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include "logistic_regression.hpp"
#include "tcp_worker_conformance.hpp"
#include "worker_errors.hpp"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

namespace {

// Every worker's replicas step alone and average their copies after every step: with plain
// SGD, synchronous training up to rounding.
using LocalSgdMultiWorkerStrategy =
    strata::Strategy<strata::placement::Mirrored, strata::communicator::HierarchicalCommunicator<>,
                     strata::sync::LocalSgd<1>>;

// train K EPOCHS [local-sgd]: MultiWorkerMirroredStrategy (or LocalSgdMultiWorkerStrategy)
// against OneDeviceStrategy on the same problem.
template <class Strategy>
int train(std::span<const std::string_view> args) {
  Strategy strategy({.num_replicas = std::stoi(std::string(args[1]))});
  example::TrainConfig config;
  config.epochs = std::stoul(std::string(args[2]));
  const auto problem = example::make_problem(1024, 8);
  const auto result = example::train(strategy, problem, config, [](std::size_t, double) {});
  strata::OneDeviceStrategy single;
  const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
  float drift = std::abs(result.bias - reference.bias);
  std::string bits = fmt::format("{:a}", result.bias);
  for (std::size_t j = 0; j < result.weights.size(); ++j) {
    drift = std::max(drift, std::abs(result.weights[j] - reference.weights[j]));
    bits += fmt::format(" {:a}", result.weights[j]);
  }
  fmt::print("replicas {}\nchief {}\nworker {} of {}\ndrift {:.3e}\nparams {}\nok\n",
             strategy.num_replicas_in_sync(), strategy.is_chief() ? 1 : 0, strategy.worker_id(),
             strategy.num_workers(), drift, bits);
  return 0;
}

// ps-train K EPOCHS [3|sync [DIR]]: the same program on every task of a parameter-server cluster;
// ps tasks serve, workers train asynchronously with K replicas each, variables unsplit or
// split in three, and print how far they landed from the known solution. With DIR, training
// resumes from the latest checkpoint there (printing "resumed STEP") and saves one at the end.
template <class Strategy>
int ps_train(std::span<const std::string_view> args) {
  if (strata::ps::serve_if_ps()) {
    fmt::print("served\n");
    return 0;
  }
  Strategy strategy({.num_replicas = std::stoi(std::string(args[1]))});
  example::TrainConfig config;
  config.epochs = std::stoul(std::string(args[2]));
  const auto problem = example::make_problem(1024, 8);
  example::TrainConfig resumable = config;
  if (args.size() > 4) resumable.checkpoint_dir = std::string(args[4]);
  const auto result = example::train(strategy, problem, resumable, [](std::size_t, double) {});
  if (result.resumed_from) fmt::print("resumed {}\n", *result.resumed_from);
  float error = std::abs(result.bias - problem.true_bias);
  std::string bits = fmt::format("{:a}", result.bias);
  for (std::size_t j = 0; j < result.weights.size(); ++j) {
    error = std::max(error, std::abs(result.weights[j] - problem.true_weights[j]));
    bits += fmt::format(" {:a}", result.weights[j]);
  }
  strata::OneDeviceStrategy single;
  const auto reference = example::train(single, problem, config, [](std::size_t, double) {});
  std::string reference_bits = fmt::format("{:a}", reference.bias);
  for (const float w : reference.weights)
    reference_bits += fmt::format(" {:a}", w);
  float drift = std::abs(result.bias - reference.bias);
  for (std::size_t j = 0; j < result.weights.size(); ++j)
    drift = std::max(drift, std::abs(result.weights[j] - reference.weights[j]));
  fmt::print(
      "replicas {}\nchief {}\nworker {} of {}\nerror {:.3e}\ndrift {:.3e}\nparams {}\nsingle "
      "{}\nok\n",
      strategy.num_replicas_in_sync(), strategy.is_chief() ? 1 : 0, strategy.worker_id(),
      strategy.num_workers(), error, drift, bits, reference_bits);
  return 0;
}

// ps-ssp K STEPS SLOW_WORKER SLOW_MS: BoundedStaleness<K> over parameter servers (K is 0 or 2;
// async: Asynchronous; backupB: SynchronousWithBackups<B>), two variables updated in one
// apply_gradients, worker SLOW_WORKER sleeping SLOW_MS before each push; prints "start N T"
// before each step, "push N T" before each push and "applied N T" after it (T: steady_clock ns).
template <class Sync>
int ps_steps(std::span<const std::string_view> args) {
  if (strata::ps::serve_if_ps()) {
    fmt::print("served\n");
    return 0;
  }
  using Strategy = strata::Strategy<strata::placement::ParameterServer<>,
                                    strata::communicator::LocalCommunicator<>, Sync>;
  Strategy strategy({.num_replicas = 1});
  const int steps = std::stoi(std::string(args[2]));
  const int slow_worker = std::stoi(std::string(args[3]));
  const auto pause = std::chrono::milliseconds(std::stoi(std::string(args[4])));
  auto w = strategy.template create_variable<float>(std::vector<float>(16, 0.0f));
  auto b = strategy.template create_variable<float>(std::vector<float>(1, 0.0f));
  const strata::optim::Sgd sgd{0.01};
  const auto now = [] { return Clock::now().time_since_epoch().count(); };
  for (int step = 0; step < steps; ++step) {
    fmt::print("start {} {}\n", step, now());
    strategy.run([&](auto& replica) {
      std::vector<float> gradient_w(16, 1.0f);
      std::vector<float> gradient_b(1, 1.0f);
      if (replica.replica_id_in_sync_group() == slow_worker) std::this_thread::sleep_for(pause);
      fmt::print("push {} {}\n", step, now());
      replica.apply_gradients(sgd, {strata::gradient_for(w, std::span(gradient_w)),
                                    strata::gradient_for(b, std::span(gradient_b))});
      fmt::print("applied {} {}\n", step, now());
    });
  }
  fmt::print("ok\n");
  return 0;
}

// Splits every variable into three shards (TF's FixedShardsPartitioner(3)).
struct ThreeShards {
  std::size_t operator()(std::span<const std::size_t> shape, std::size_t element_bytes) const {
    return strata::ps::FixedShardsPartitioner{3}(shape, element_bytes);
  }
};
using ShardedParameterServerStrategy =
    strata::Strategy<strata::placement::ParameterServer<ThreeShards, strata::ps::GreedyPlacement>,
                     strata::communicator::LocalCommunicator<>, strata::sync::Asynchronous>;
// TF1's SyncReplicasOptimizer: every replica's gradient of a step, added up on the servers.
using SynchronousParameterServerStrategy =
    strata::Strategy<strata::placement::ParameterServer<>,
                     strata::communicator::LocalCommunicator<>, strata::sync::Synchronous>;

// TF1's SyncReplicasOptimizer with a backup worker: the first replicas − 1 gradients of a step.
using BackupParameterServerStrategy = strata::Strategy<strata::placement::ParameterServer<>,
                                                       strata::communicator::LocalCommunicator<>,
                                                       strata::sync::SynchronousWithBackups<1>>;

// raise K WORKER: a user's exception on one replica of one worker, the others in all-reduces.
int raise_in_replica(std::span<const std::string_view> args) {
  const int replicas = std::stoi(std::string(args[1]));
  strata::MultiWorkerMirroredStrategy strategy({.num_replicas = replicas});
  const int culprit = std::stoi(std::string(args[2])) * replicas + replicas - 1;
  for (int step = 0; step < 1000; ++step) {
    strategy.run([&](auto& context) {
      if (step == 3 && context.replica_id_in_sync_group() == culprit)
        throw std::runtime_error("loss is NaN at step 3");
      std::vector<float> gradient(1000, 1.0F);
      context.all_reduce(strata::ReduceOp::sum, std::span(gradient));
    });
  }
  fmt::print("ok\n");
  return 0;
}

// conformance [LARGE]: every collective once, then all_reduce with each algorithm.
int conformance_scenario(std::span<const std::string_view> args,
                         strata::cluster::ResolvedCluster& resolved, Clock::time_point& began) {
  using strata::communicator::Collective;
  using strata::communicator::TcpAllReduce;
  const std::size_t large = args.size() == 2 ? std::stoul(std::string(args[1])) : 65539;
  const std::size_t counts[] = {0, 1, 7, 1023, large};
  constexpr Collective kEvery[] = {Collective::all_reduce, Collective::broadcast,
                                   Collective::reduce, Collective::all_gather,
                                   Collective::reduce_scatter};
  constexpr Collective kAllReduce[] = {Collective::all_reduce};
  struct Phase {
    std::string_view name;
    TcpAllReduce algorithm;
    std::span<const Collective> kinds;
    bool shared_memory;
  };
  // The algorithm is a tunable every rank must share, so each needs a group of its own;
  // the other collectives do not depend on it and run once.
  // The processes share a host: the first phase runs through shared memory, the others keep
  // every byte on TCP.
  const Phase phases[] = {{"shm", TcpAllReduce::automatic, kEvery, true},
                          {"tcp", TcpAllReduce::automatic, kEvery, false},
                          {"tcp<ring>", TcpAllReduce::ring, kAllReduce, false},
                          {"tcp<rd>", TcpAllReduce::recursive_doubling, kAllReduce, false}};
  auto membership = strata::communicator::membership_of(resolved);
  conformance::Totals totals;
  const auto started = Clock::now();
  int rank = 0;
  int size = 0;
  for (const Phase& phase : phases) {
    strata::communicator::TcpOptions tcp;
    tcp.all_reduce = phase.algorithm;
    tcp.shared_memory = phase.shared_memory;
    began = Clock::now();
    strata::communicator::TcpCommunicator comm(membership, tcp);
    if (comm.uses_shared_memory() != phase.shared_memory) {
      fmt::print("conformance failed: phase {} {} shared memory\n", phase.name,
                 comm.uses_shared_memory() ? "uses" : "does not use");
      return 8;
    }
    membership.listen_fd = -1;  // adopted by the first group; later ones bind their own
    rank = comm.rank();
    size = comm.size();
    conformance::run_phase(comm, phase.name, phase.kinds, counts, began, totals);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (totals.failed > 0 || totals.not_identical > 0) {
    fmt::print(
        "conformance failed: rank {} of {}, {} of {} cases wrong, {} wrong elements, {} "
        "collectives not bit-identical across ranks\n",
        rank, size, totals.failed, totals.cases, totals.wrong, totals.not_identical);
    return 8;
  }
  fmt::print("conformance ok: rank {} of {}, {} cases, {:.2f} s\n", rank, size, totals.cases,
             seconds);
  return 0;
}

// loop ITERATIONS COUNT [lend]: all-reduces of small integers, each result checked.
int loop(strata::communicator::TcpCommunicator& comm, std::span<const std::string_view> args,
         Clock::time_point& began) {
  const int rank = comm.rank();
  const int size = comm.size();
  const long iterations = std::stol(std::string(args[1]));
  const auto count = static_cast<std::size_t>(std::stol(std::string(args[2])));
  std::vector<float> data(count);
  for (long i = 0; i < iterations; ++i) {
    // Small integers: every partial sum is exact in float, whatever the order.
    for (std::size_t k = 0; k < count; ++k)
      data[k] = static_cast<float>((rank + 1) * ((k + static_cast<std::size_t>(i)) % 7));
    began = Clock::now();
    comm.all_reduce(std::span(data), strata::ReduceOp::sum);
    const float ranks = static_cast<float>(size * (size + 1) / 2);
    for (std::size_t k = 0; k < count; ++k)
      if (data[k] != ranks * static_cast<float>((k + static_cast<std::size_t>(i)) % 7)) {
        fmt::print("wrong result at iteration {} index {}: {}\n", i, k, data[k]);
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

// join, mismatch and loop: one group of the cluster the environment describes.
int group_scenario(std::span<const std::string_view> args,
                   strata::cluster::ResolvedCluster& resolved, Clock::time_point& began) {
  strata::communicator::TcpOptions tcp;
  const bool lend = args[0] == "loop" && args.size() == 4 && args[3] == "lend";
  if (lend) tcp.lend_from_bytes = 0;  // every message of 64 KiB or more
  tcp.shared_memory = strata::environment_variable("STRATA_TEST_SHARED_MEMORY") != "0";
  strata::communicator::TcpCommunicator comm(strata::communicator::membership_of(resolved), tcp);
  const int rank = comm.rank();
  fmt::print("transport {}\n", comm.uses_shared_memory() ? "shm" : "tcp");
  std::fflush(stdout);
  if (args[0] == "join") {
    began = Clock::now();
    comm.barrier();
    fmt::print("ok rank {} of {}\n", rank, comm.size());
    return 0;
  }
  if (args[0] == "mismatch") {
    std::vector<float> data(rank == 1 ? 1000 : 999, 1.0F);
    began = Clock::now();
    comm.all_reduce(std::span(data), strata::ReduceOp::sum);
    fmt::print("ok\n");
    return 0;
  }
  if (args[0] == "loop" && (args.size() == 3 || lend)) return loop(comm, args, began);
  fmt::print(stderr, "unknown scenario\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    fmt::print(stderr,
               "usage: strata_test_tcp_worker loop N COUNT [lend] | mismatch | join | "
               "train K EPOCHS [local-sgd] | "
               "raise K WORKER | conformance [LARGE] | ps-train K EPOCHS [3|sync|backup [DIR]] | "
               "ps-ssp 0|2|async|backup0|backup1 STEPS SLOW_WORKER SLOW_MS\n");
    return 2;
  }
  auto began = Clock::now();
  return strata::testing::exit_code_of(began, [&] {
    if (args[0] == "train" && args.size() == 3)
      return train<strata::MultiWorkerMirroredStrategy>(args);
    if (args[0] == "train" && args.size() == 4 && args[3] == "local-sgd")
      return train<LocalSgdMultiWorkerStrategy>(args);
    if (args[0] == "raise" && args.size() == 3) return raise_in_replica(args);
    if (args[0] == "ps-train" && args.size() == 3)
      return ps_train<strata::ParameterServerStrategy>(args);
    if (args[0] == "ps-train" && (args.size() == 4 || args.size() == 5) && args[3] == "3")
      return ps_train<ShardedParameterServerStrategy>(args);
    if (args[0] == "ps-train" && (args.size() == 4 || args.size() == 5) && args[3] == "sync")
      return ps_train<SynchronousParameterServerStrategy>(args);
    if (args[0] == "ps-ssp" && args.size() == 5 && args[1] == "0")
      return ps_steps<strata::sync::BoundedStaleness<0>>(args);
    if (args[0] == "ps-ssp" && args.size() == 5 && args[1] == "2")
      return ps_steps<strata::sync::BoundedStaleness<2>>(args);
    if (args[0] == "ps-train" && (args.size() == 4 || args.size() == 5) && args[3] == "backup")
      return ps_train<BackupParameterServerStrategy>(args);
    if (args[0] == "ps-ssp" && args.size() == 5 && args[1] == "async")
      return ps_steps<strata::sync::Asynchronous>(args);
    if (args[0] == "ps-ssp" && args.size() == 5 && args[1] == "backup0")
      return ps_steps<strata::sync::SynchronousWithBackups<0>>(args);
    if (args[0] == "ps-ssp" && args.size() == 5 && args[1] == "backup1")
      return ps_steps<strata::sync::SynchronousWithBackups<1>>(args);
    auto resolved = strata::resolve_cluster();
    if (args[0] == "conformance" && args.size() <= 2)
      return conformance_scenario(args, resolved, began);
    return group_scenario(args, resolved, began);
  });
}
