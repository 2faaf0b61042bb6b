// Compiled by tools/compile-time: MultiWorkerMirroredStrategy with the demo's training loop.
#include <strata/strategies.hpp>

#include "logistic_regression.hpp"

int main() {
  strata::MultiWorkerMirroredStrategy strategy;
  const auto problem = example::make_problem(1024, 8);
  const auto result =
      example::train(strategy, problem, example::TrainConfig{}, [](std::size_t, double) {});
  return result.bias > 0 ? 0 : 1;
}
