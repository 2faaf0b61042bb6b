// examples/train.cpp — the demo: logistic regression trained data-parallel with strata.
//
//   strata_example_train [--strategy mirrored|central|one|default] [--replicas N]
//                        [--epochs E] [--batch B]
//
// Prints the loss per epoch, then the learned parameters next to the known solution.
// Exits non-zero if training did not reach it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "logistic_regression.hpp"

namespace {

struct Arguments {
  std::string strategy = "mirrored";
  int replicas = 4;
  example::TrainConfig config;
};

[[noreturn]] void usage(const char* why) {
  fmt::print(stderr,
             "{}\nusage: strata_example_train [--strategy mirrored|central|one|default] "
             "[--replicas N] [--epochs E] [--batch B]\n",
             why);
  std::exit(2);
}

Arguments parse(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
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
      else
        usage("unknown flag");
    } catch (const std::logic_error&) {
      usage("flag values must be numbers");
    }
  }
  return args;
}

template <class Strategy>
int run(const Arguments& args, int replicas) {
  Strategy strategy({.num_replicas = replicas});
  const auto problem = example::make_problem(1024, 8);
  fmt::print("strategy {} with {} replica(s) in sync, global batch {}\n", args.strategy,
             strategy.num_replicas_in_sync(), args.config.global_batch);
  const auto result = example::train(
      strategy, problem, args.config,
      [](std::size_t epoch, double loss) { fmt::print("epoch {:3}  loss {:.6f}\n", epoch, loss); });
  float worst = std::abs(result.bias - problem.true_bias);
  for (std::size_t j = 0; j < problem.features; ++j) {
    fmt::print("w[{}] = {:+.5f}  (solution {:+.5f})\n", j, result.weights[j],
               problem.true_weights[j]);
    worst = std::max(worst, std::abs(result.weights[j] - problem.true_weights[j]));
  }
  fmt::print("b    = {:+.5f}  (solution {:+.5f})\nlargest error {:.2e}\n", result.bias,
             problem.true_bias, worst);
  return worst < 1e-3f ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Arguments args = parse(argc, argv);
  try {
    if (args.strategy == "mirrored") return run<strata::MirroredStrategy>(args, args.replicas);
    if (args.strategy == "central") return run<strata::CentralStorageStrategy>(args, args.replicas);
    if (args.strategy == "one") return run<strata::OneDeviceStrategy>(args, 1);
    if (args.strategy == "default") return run<strata::DefaultStrategy>(args, 1);
    usage("unknown strategy");
  } catch (const strata::Error& error) {
    fmt::print(stderr, "{}\n", error.what());
    return 1;
  }
}
