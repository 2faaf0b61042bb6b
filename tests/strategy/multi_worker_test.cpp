// MultiWorkerMirroredStrategy across real processes: training examples/logistic_regression.hpp
// with workers × local replicas lands on the parameters of single-process training on the
// same global batches, every worker holds bit-identical parameters, and exactly one worker is
// the chief. Also: a one-worker cluster behaves as MirroredStrategy.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/strategies.hpp>

#include "logistic_regression.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
const std::string kWorker = STRATA_TEST_TCP_WORKER;

}  // namespace

TEST_CASE("multi-worker training equals single-process training on the same global batch") {
  for (auto [workers, local] : {std::pair{2, 1}, std::pair{3, 2}}) {
    CAPTURE(workers);
    CAPTURE(local);
    strata::testing::Workers run(kWorker, strata::testing::loopback_cluster(workers),
                                 {"train", std::to_string(local), "10"},
                                 {{"STRATA_TIMEOUT", "30s"}});
    std::string params;
    int chiefs = 0;
    std::set<std::string> workers_seen;
    for (auto& process : run.processes) {
      REQUIRE(process.wait_for(120s));
      const std::string output = process.output();
      CHECK_MESSAGE(process.exit_code() == 0, output);
      CHECK(strata::testing::line_after(output, "replicas") == std::to_string(workers * local));
      CHECK_MESSAGE(std::stod(strata::testing::line_after(output, "drift")) < 1e-4, output);
      chiefs += strata::testing::line_after(output, "chief") == "1" ? 1 : 0;
      // The chief is worker 0; every worker knows its index and the count.
      const std::string worker = strata::testing::line_after(output, "worker");
      workers_seen.insert(worker);
      CHECK((strata::testing::line_after(output, "chief") == "1") == worker.starts_with("0 of"));
      CHECK(worker.ends_with(fmt::format(" of {}", workers)));
      // Every worker applied the same aggregated gradients: the same bits everywhere.
      if (params.empty()) params = strata::testing::line_after(output, "params");
      CHECK(strata::testing::line_after(output, "params") == params);
    }
    CHECK(chiefs == 1);
    CHECK(workers_seen.size() == static_cast<std::size_t>(workers));
  }
}

TEST_CASE("local SGD across processes: copies averaged every step train as synchronous SGD") {
  // 2 workers of 2 replicas; the example trains with plain SGD, so LocalSgd<1> lands where
  // synchronous training does, up to rounding, and every worker holds the same bits.
  strata::testing::Workers run(kWorker, strata::testing::loopback_cluster(2),
                               {"train", "2", "10", "local-sgd"}, {{"STRATA_TIMEOUT", "30s"}});
  std::string params;
  for (auto& process : run.processes) {
    REQUIRE(process.wait_for(120s));
    const std::string output = process.output();
    CHECK_MESSAGE(process.exit_code() == 0, output);
    CHECK(strata::testing::line_after(output, "replicas") == "4");
    CHECK_MESSAGE(std::stod(strata::testing::line_after(output, "drift")) < 1e-4, output);
    if (params.empty()) params = strata::testing::line_after(output, "params");
    CHECK(strata::testing::line_after(output, "params") == params);
  }
}

TEST_CASE("a one-worker cluster behaves as MirroredStrategy") {
  // Nothing in the environment: a valid one-worker cluster.
  strata::MultiWorkerMirroredStrategy multi({.num_replicas = 3});
  strata::MirroredStrategy mirrored({.num_replicas = 3});
  CHECK(multi.num_replicas_in_sync() == 3);
  CHECK(multi.num_local_replicas() == 3);
  CHECK(multi.is_chief());
  auto reduce_in = [](auto& strategy) {
    auto values = strategy.run([](auto& ctx) {
      std::vector<float> data{float(ctx.replica_id_in_sync_group()) + 0.5F, 2.0F};
      ctx.all_reduce(strata::ReduceOp::sum, std::span(data));
      return data[0];
    });
    return strategy.reduce(strata::ReduceOp::mean, values);
  };
  CHECK(reduce_in(multi) == reduce_in(mirrored));
}

TEST_CASE("communicator settings reach the TCP communicator (TF's communication_options)") {
  using strata::communicator::TcpAllReduce;
  using strata::communicator::TcpOptions;
  strata::MultiWorkerMirroredStrategy strategy(
      {.num_replicas = 2}, TcpOptions{.chunk_bytes = 4096, .all_reduce = TcpAllReduce::ring});
  strategy.run([](auto& ctx) {
    const auto& tcp = ctx.communicator().inter_worker().tcp_options();
    CHECK(tcp.all_reduce == TcpAllReduce::ring);
    CHECK(tcp.chunk_bytes == 4096);
  });
  CHECK_THROWS_AS(
      strata::MultiWorkerMirroredStrategy({.num_replicas = 1}, TcpOptions{.chunk_bytes = 1}),
      strata::ConfigurationError);
}

TEST_CASE("a one-worker cluster trains to the parameters of MirroredStrategy") {
  strata::MultiWorkerMirroredStrategy multi({.num_replicas = 4});
  strata::MirroredStrategy mirrored({.num_replicas = 4});
  example::TrainConfig config;
  config.epochs = 5;
  const auto problem = example::make_problem(512, 8);
  const auto a = example::train(multi, problem, config, [](std::size_t, double) {});
  const auto b = example::train(mirrored, problem, config, [](std::size_t, double) {});
  CHECK(a.bias == doctest::Approx(b.bias).epsilon(1e-6));
  for (std::size_t j = 0; j < a.weights.size(); ++j) {
    CAPTURE(j);
    CHECK(a.weights[j] == doctest::Approx(b.weights[j]).epsilon(1e-6));
  }
}
