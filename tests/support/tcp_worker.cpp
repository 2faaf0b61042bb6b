// tests/support/tcp_worker.cpp — a worker process for the multi-process TCP tests.
//
//   strata_test_tcp_worker SCENARIO [ARGS...]      (cluster from resolve_cluster(): TF_CONFIG, ...)
//
// Scenarios:
//   loop ITERATIONS COUNT   all_reduce(sum) of COUNT floats ITERATIONS times, each result
//                           checked against the value every rank can compute; prints
//                           "ready" after the first iteration, "ok" at the end.
//   mismatch                all_reduce whose count depends on the rank (rank 1 differs).
//   join                    forms the group, runs a barrier.
//   train K EPOCHS          trains examples/logistic_regression.hpp with
//                           MultiWorkerMirroredStrategy (K local replicas) and with
//                           OneDeviceStrategy; prints "replicas N", "drift D" (largest
//                           parameter difference) and "params" with the exact bits.
// On a strata::Error it prints "error KIND MILLISECONDS MESSAGE" (time since the error's call
// began) and exits with 3 (PeerFailureError), 4 (TimeoutError), 5 (MismatchError),
// 6 (ConfigurationError) or 7 (other); a wrong result exits 8.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/strategies.hpp>

#include <strata/communicator/tcp.hpp>
#include <strata/core/error.hpp>
#include "logistic_regression.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int report(const char* kind, int code, Clock::time_point began, const std::exception& error) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
  fmt::print("error {} {} {}\n", kind, ms, error.what());
  std::fflush(stdout);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    fmt::print(stderr, "usage: strata_test_tcp_worker loop N COUNT | mismatch | join\n");
    return 2;
  }
  auto began = Clock::now();
  try {
    if (args[0] == "train" && args.size() == 3) {
      strata::MultiWorkerMirroredStrategy strategy(
          {.num_replicas = std::stoi(std::string(args[1]))});
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
      fmt::print("replicas {}\nchief {}\ndrift {:.3e}\nparams {}\nok\n",
                 strategy.num_replicas_in_sync(), strategy.is_chief() ? 1 : 0, drift, bits);
      return 0;
    }
    auto resolved = strata::cluster::resolve_cluster();
    strata::communicator::TcpCommunicator comm(strata::communicator::membership_of(resolved));
    const int rank = comm.rank();
    const int size = comm.size();
    if (args[0] == "join") {
      began = Clock::now();
      comm.barrier();
      fmt::print("ok rank {} of {}\n", rank, size);
      return 0;
    }
    if (args[0] == "mismatch") {
      std::vector<float> data(rank == 1 ? 1000 : 999, 1.0F);
      began = Clock::now();
      comm.all_reduce(std::span(data), strata::ReduceOp::sum);
      fmt::print("ok\n");
      return 0;
    }
    if (args[0] == "loop" && args.size() == 3) {
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
    fmt::print(stderr, "unknown scenario\n");
    return 2;
  } catch (const strata::PeerFailureError& e) {
    return report("peer_failure", 3, began, e);
  } catch (const strata::TimeoutError& e) {
    return report("timeout", 4, began, e);
  } catch (const strata::MismatchError& e) {
    return report("mismatch", 5, began, e);
  } catch (const strata::ConfigurationError& e) {
    return report("configuration", 6, began, e);
  } catch (const std::exception& e) {
    return report("other", 7, began, e);
  }
}
