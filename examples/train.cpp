// examples/train.cpp — the demo: logistic regression trained data-parallel with strata.
//
//   strata_example_train [--strategy mirrored|multi-worker|multi-worker-local-sgd|central|
//                                    parameter-server|parameter-server-sync|
//                                    parameter-server-backup|coordinator|one|default|
//                                    gpu-mirrored|gpu-multi-worker|gpu-central]
//                        [--replicas N]
//                        [--epochs E] [--batch B] [--checkpoint-dir DIR [--checkpoint-every N]]
//
// Prints the loss per epoch, then the learned parameters next to the known solution, and
// compares them with single-process training (OneDeviceStrategy) on the same global batches.
// Exits non-zero if training did not reach the solution or differs from the single-process run.
// The GPU strategies (built with CUDA; gpu-mirrored and gpu-multi-worker with NCCL too) compute
// each replica's gradient with a CUDA kernel (gpu_kernels.cu); gpu-mirrored and gpu-central
// default to one replica per GPU, gpu-multi-worker to one per process, as multi-worker does.
//
// multi-worker runs one process per worker, with the cluster from TF_CONFIG (or torchrun,
// OpenMPI, SLURM); only the chief prints:
//   strata-launch -n 4 -- strata_example_train --strategy multi-worker
// multi-worker-local-sgd is the same cluster under sync::LocalSgd<4>: every replica steps on its
// own gradients and the copies are averaged every fourth step, so it lands near the solution,
// not on single-process training's parameters (checked against the solution only).
// parameter-server runs the same program on every task of a cluster with ps tasks: those serve
// the variables, the workers train asynchronously (so only the distance to the solution is
// checked, not the difference from single-process training):
//   strata-launch -n 4 --ps 2 -- strata_example_train --strategy parameter-server
// parameter-server-sync trains synchronously over the same servers (TF1's SyncReplicasOptimizer):
// the servers add up every replica's gradient of a step before they apply it, so it is checked
// against single-process training as the synchronous strategies are. parameter-server-backup
// aggregates the first gradients of each step and drops the last replica's (one backup worker),
// so it is checked against the solution only.
// With --checkpoint-dir the chief saves a checkpoint every N steps (and at the end) and every
// task resumes from the latest one when it starts: kill a run, start it again, and it ends
// with the parameters an uninterrupted run reaches, bit for bit (synchronous strategies).
// coordinator runs TF2's model on a cluster with a chief: the chief's ClusterCoordinator
// schedules one step per global batch on whichever worker is free (coordinated_training.hpp);
// asynchronous, so checked against the solution only:
//   strata-launch -n 3 --chief --ps 2 -- strata_example_train --strategy coordinator
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "coordinated_training.hpp"
#include "logistic_regression.hpp"
#if STRATA_HAS_CUDA
#include "gpu_gradients.hpp"
#endif

namespace {

struct Arguments {
  std::string strategy = "mirrored";
  int replicas = 0;  // 0: the strategy's default (4 for mirrored and central)
  example::TrainConfig config;
};

constexpr std::string_view kUsage =
    "usage: strata_example_train [--strategy mirrored|multi-worker|multi-worker-local-sgd|\n"
    "                                        central|parameter-server|parameter-server-sync|\n"
    "                                        parameter-server-backup|coordinator|one|default|\n"
    "                                        gpu-mirrored|gpu-multi-worker|gpu-central]\n"
    "                            [--replicas N] [--epochs E] [--batch B]\n"
    "                            [--checkpoint-dir DIR [--checkpoint-every N]]\n"
    "\n"
    "Trains a logistic regression under the strategy and checks it against training on one\n"
    "replica. multi-worker reads its cluster from TF_CONFIG (strata-launch sets it), torchrun,\n"
    "OpenMPI or SLURM, as multi-worker-local-sgd does (local SGD: copies averaged every fourth\n"
    "step, checked against the solution only); parameter-server from TF_CONFIG with ps tasks\n"
    "(strata-launch --ps M),\n"
    "which serve while the workers train asynchronously (checked against the solution only;\n"
    "parameter-server-sync: synchronously, checked as the synchronous strategies are;\n"
    "parameter-server-backup: synchronously but for the last gradient of each step).\n"
    "coordinator: the chief (strata-launch --chief) schedules the steps on the workers, which\n"
    "train against the ps tasks asynchronously (checked against the solution only).\n"
    "gpu-mirrored (NCCL) and gpu-central run one replica per GPU unless\n"
    "--replicas says otherwise, gpu-multi-worker (NCCL) one GPU per process, in builds with\n"
    "CUDA. --checkpoint-dir: the chief saves a checkpoint every N steps (default: at the end)\n"
    "and every task resumes from the latest one in DIR (not with coordinator).\n"
    "Exit status: 0 when the result matches,\n"
    "1 when it does not or on any other error, 2 for a bad command line, and\n"
    "strata::ExitStatus for strata's errors:\n"
    "69 peer failure, 70 usage error, 74 checkpoint, 75 timeout, 76 mismatch, 78 configuration.\n";

[[noreturn]] void usage(const char* why) {
  fmt::print(stderr, "strata_example_train: {}\n{}", why, kUsage);
  std::exit(2);
}

Arguments parse(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    }
    if (i + 1 >= argc) usage("missing value after a flag");
    const std::string value = argv[++i];
    try {
      if (flag == "--strategy")
        args.strategy = value;
      else if (flag == "--replicas")
        args.replicas = std::stoi(value);
      else if (flag == "--epochs")
        args.config.epochs = std::stoul(value);
      else if (flag == "--batch")
        args.config.global_batch = std::stoul(value);
      else if (flag == "--checkpoint-dir")
        args.config.checkpoint_dir = value;
      else if (flag == "--checkpoint-every")
        args.config.checkpoint_every = std::stoul(value);
      else
        usage("unknown flag");
    } catch (const std::logic_error&) {
      usage("flag values must be numbers");
    }
  }
  return args;
}

int check(const example::TrainResult& result, const example::Problem& problem,
          const example::TrainConfig& config, bool synchronous, bool chief);

template <class Strategy>
int run(const Arguments& args, int replicas) {
  Strategy strategy({.num_replicas = replicas});
  const bool chief = strategy.is_chief();
  const auto problem = example::make_problem(1024, 8);
  if (chief)
    fmt::print("strategy {} with {} replica(s) in sync, global batch {}\n", args.strategy,
               strategy.num_replicas_in_sync(), args.config.global_batch);
  // Asynchronous workers of a parameter-server cluster never wait for each other, so each
  // reduces the loss of its own replicas: its share of the batch's.
  constexpr bool kOwnShare =
      Strategy::placement_type::kUpdateSite == strata::placement::UpdateSite::servers &&
      !Strategy::sync_type::kWaitsForAllReplicas;
  const char* share = kOwnShare ? " (this worker's share)" : "";
  const auto result =
      example::train(strategy, problem, args.config, [&](std::size_t epoch, double loss) {
        if (chief) fmt::print("epoch {:3}  loss {:.6f}{}\n", epoch, loss, share);
      });
  if (chief && result.resumed_from)
    fmt::print("resumed from the checkpoint of step {}\n", *result.resumed_from);
  return check(result, problem, args.config, Strategy::sync_type::kWaitsForAllReplicas, chief);
}

// Prints the learned parameters next to the solution; 0 when they reached it and, for
// synchronous training, equal single-process training on the same global batches (up to the
// order in which gradients were summed); asynchronous training lands only near that.
int check(const example::TrainResult& result, const example::Problem& problem,
          const example::TrainConfig& config, bool synchronous, bool chief) {
  strata::OneDeviceStrategy single;
  example::TrainConfig uninterrupted = config;
  uninterrupted.checkpoint_dir.clear();  // the reference trains from the start, saving nothing
  const auto reference = example::train(single, problem, uninterrupted, [](std::size_t, double) {});
  float worst = std::abs(result.bias - problem.true_bias);
  float drift = std::abs(result.bias - reference.bias);
  for (std::size_t j = 0; j < problem.features; ++j) {
    if (chief)
      fmt::print("w[{}] = {:+.5f}  (solution {:+.5f})\n", j, result.weights[j],
                 problem.true_weights[j]);
    worst = std::max(worst, std::abs(result.weights[j] - problem.true_weights[j]));
    drift = std::max(drift, std::abs(result.weights[j] - reference.weights[j]));
  }
  if (chief)
    fmt::print(
        "b    = {:+.5f}  (solution {:+.5f})\nlargest error {:.2e}\n"
        "largest difference from single-process training {:.2e}{}\n",
        result.bias, problem.true_bias, worst, drift,
        synchronous ? "" : " (not every gradient meets every step: not expected to match)");
  return worst < 1e-3f && (drift < 1e-4f || !synchronous) ? 0 : 1;
}

// TF2's model: ps tasks serve, workers serve the coordinator, the chief coordinates.
int run_coordinated(const Arguments& args) {
  if (!args.config.checkpoint_dir.empty())
    usage("--checkpoint-dir is not supported by coordinator");
  const auto functions = example::register_training();  // the same on every task
  if (strata::ps::serve_if_ps()) return 0;
  if (strata::coordinator::serve_if_worker(functions.registry)) return 0;
  const auto problem = example::make_problem(1024, 8);
  fmt::print("coordinator on the chief, global batch {}, one function per batch\n",
             args.config.global_batch);
  const auto result = example::train_coordinated(
      functions, problem, args.config,
      [](std::size_t epoch, double loss) { fmt::print("epoch {:3}  loss {:.6f}\n", epoch, loss); });
  return check(result, problem, args.config, /*synchronous=*/false, /*chief=*/true);
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line even into a pipe (strata-launch, a log collector): a worker that is stopped
  // loses no line it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Arguments args = parse(argc, argv);
  try {
    const int local = args.replicas > 0 ? args.replicas : 4;
    if (args.strategy == "mirrored") return run<strata::MirroredStrategy>(args, local);
    if (args.strategy == "multi-worker")
      return run<strata::MultiWorkerMirroredStrategy>(args, args.replicas);
    if (args.strategy == "multi-worker-local-sgd")
      return run<strata::Strategy<strata::placement::Mirrored,
                                  strata::communicator::HierarchicalCommunicator<>,
                                  strata::sync::LocalSgd<4>>>(args, args.replicas);
    if (args.strategy == "central") return run<strata::CentralStorageStrategy>(args, local);
    if (args.strategy == "parameter-server" || args.strategy == "parameter-server-sync" ||
        args.strategy == "parameter-server-backup") {
      if (strata::ps::serve_if_ps()) return 0;  // a ps task: served until the workers finished
      if (args.strategy == "parameter-server")
        return run<strata::ParameterServerStrategy>(args, args.replicas);
      // TF1's SyncReplicasOptimizer: the servers aggregate every replica's gradient per step,
      // or the first ones to arrive but one (a backup worker).
      using Servers = strata::placement::ParameterServer<>;
      using Local = strata::communicator::LocalCommunicator<>;
      if (args.strategy == "parameter-server-sync")
        return run<strata::Strategy<Servers, Local, strata::sync::Synchronous>>(args,
                                                                                args.replicas);
      return run<strata::Strategy<Servers, Local, strata::sync::SynchronousWithBackups<1>>>(
          args, args.replicas);
    }
    if (args.strategy == "coordinator") return run_coordinated(args);
    if (args.strategy == "one") return run<strata::OneDeviceStrategy>(args, 1);
    if (args.strategy == "default") return run<strata::DefaultStrategy>(args, 1);
#if STRATA_HAS_NCCL
    if (args.strategy == "gpu-mirrored")
      return run<strata::GpuMirroredStrategy>(args, args.replicas);
    if (args.strategy == "gpu-multi-worker")
      return run<strata::GpuMultiWorkerMirroredStrategy>(args, args.replicas);
#endif
#if STRATA_HAS_CUDA
    if (args.strategy == "gpu-central")
      return run<strata::GpuCentralStorageStrategy>(args, args.replicas);
#endif
    usage("unknown strategy");
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}\n", error.what());
    return static_cast<int>(strata::exit_status_of(error));
  }
}
