// tests/support/coordinator_task.cpp — the same program on every task of a ClusterCoordinator
// cluster, for the multi-process fault tests (tests/coordinator/process_test.cpp).
//
//   strata_test_coordinator_task EPOCHS STEP_MS LOG_DIR     (cluster and task from TF_CONFIG)
//
// The example problem (examples/coordinated_training.hpp), one function per global batch:
//   ps task     serves (serve_if_ps), then prints "served".
//   worker      serves the coordinator (serve_if_worker), then prints "worker done". Each process
//               appends to LOG_DIR/worker<I>-<PID>.log: "built" when it builds its runner,
//               "start E S" before a step, "end E S" after it (the step sleeps STEP_MS first),
//               and "error CLASS AT_NS MESSAGE" when a step raises (then re-raised).
//   chief       trains EPOCHS epochs through a ClusterCoordinator (example::train_coordinated:
//               its learning rate divided by the number of workers); prints "epoch E" after
//               each, then "params" (the model's bits), "error" (largest distance from the
//               known solution) and "report scheduled .. succeeded .. failed .. cancelled ..
//               retried .. worker_failures .. connections ..".
// On an exception it prints "error CLASS AT_NS MESSAGE" (AT_NS: steady_clock's time since its
// epoch, CLOCK_MONOTONIC, comparable across processes) and exits with exit_status_of(error).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/core/error.hpp>
#include <strata/serve_if_ps.hpp>
#include <strata/serve_if_worker.hpp>

#include "coordinated_training.hpp"

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::string_view class_of(const std::exception& error) {
  if (dynamic_cast<const strata::PeerFailureError*>(&error) != nullptr) return "PeerFailureError";
  if (dynamic_cast<const strata::TimeoutError*>(&error) != nullptr) return "TimeoutError";
  if (dynamic_cast<const strata::CancelledError*>(&error) != nullptr) return "CancelledError";
  if (dynamic_cast<const strata::FunctionError*>(&error) != nullptr) return "FunctionError";
  if (dynamic_cast<const strata::Error*>(&error) != nullptr) return "Error";
  return "other";
}

// One line appended to this worker's log with one write(2): whole lines, even when killed.
void log_line(const std::string& dir, int worker, const std::string& line) {
  const std::string path = fmt::format("{}/worker{}-{}.log", dir, worker, ::getpid());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

example::TrainingFunctions register_functions(const std::string& dir, int step_ms) {
  strata::coordinator::Functions registry;
  auto runner = registry.add_resource(
      "test.runner", [dir](strata::coordinator::Worker& worker, std::uint64_t examples,
                           std::uint64_t features, double learning_rate, std::uint64_t batch) {
        example::TrainConfig config;
        config.learning_rate = learning_rate;
        config.global_batch = batch;
        auto built = std::make_unique<example::StepRunner>(
            example::make_problem(examples, features), config);
        log_line(dir, worker.index(), "built");
        return built;
      });
  auto step = registry.add(
      "test.step",
      [dir, step_ms](strata::coordinator::Worker& worker,
                     strata::coordinator::PerWorker<std::unique_ptr<example::StepRunner>> runner,
                     std::uint64_t epoch, std::uint64_t step) {
        log_line(dir, worker.index(), fmt::format("start {} {}", epoch, step));
        try {
          std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
          const double loss = worker.get(runner)->step(epoch, step);
          log_line(dir, worker.index(), fmt::format("end {} {}", epoch, step));
          return loss;
        } catch (const std::exception& e) {
          log_line(dir, worker.index(),
                   fmt::format("error {} {} {}", class_of(e), now_ns(), e.what()));
          throw;
        }
      });
  return {std::move(registry), std::move(runner), std::move(step)};
}

int chief(const example::TrainingFunctions& functions, std::size_t epochs) {
  const auto problem = example::make_problem(1024, 8);
  example::TrainConfig config;
  config.epochs = epochs;
  strata::coordinator::CoordinatorReport report;
  const auto result = example::train_coordinated(
      functions, problem, config,
      [](std::size_t epoch, double) { fmt::print("epoch {}\n", epoch); }, {}, &report);
  float error = std::abs(result.bias - problem.true_bias);
  std::string bits = fmt::format("{:a}", result.bias);
  for (std::size_t j = 0; j < result.weights.size(); ++j) {
    error = std::max(error, std::abs(result.weights[j] - problem.true_weights[j]));
    bits += fmt::format(" {:a}", result.weights[j]);
  }
  fmt::print("params {}\nerror {:.3e}\n", bits, error);
  fmt::print(
      "report scheduled {} succeeded {} failed {} cancelled {} retried {} worker_failures {} "
      "connections {}\n",
      report.scheduled, report.succeeded, report.failed, report.cancelled, report.retried,
      report.worker_failures, report.connections);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 4) {
    std::fputs("usage: strata_test_coordinator_task EPOCHS STEP_MS LOG_DIR\n", stderr);
    return 2;
  }
  try {
    const auto functions = register_functions(argv[3], std::stoi(argv[2]));
    if (strata::ps::serve_if_ps()) {
      fmt::print("served\n");
      return 0;
    }
    if (strata::coordinator::serve_if_worker(functions.registry)) {
      fmt::print("worker done\n");
      return 0;
    }
    return chief(functions, std::stoul(argv[1]));
  } catch (const std::exception& e) {
    fmt::print("error {} {} {}\n", class_of(e), now_ns(), e.what());
    return static_cast<int>(strata::exit_status_of(e));
  }
}
