// A consumer of strata: the umbrella header, a two-replica all-reduce through a strategy, and
// a two-rank TCP all-reduce, each checked against the sums computed by hand. Built header-only
// or against strata::compiled (consumer/CMakeLists.txt).
#include <strata/strata.hpp>

#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

int main() {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  auto sums = strategy.run([](auto& replica) {
    return replica.all_reduce(strata::ReduceOp::sum, replica.replica_id_in_sync_group() + 1);
  });

  auto ranks = strata::communicator::TcpCommunicator::create(2);
  std::vector<double> mine{1.5, -2.0, 3.25}, theirs{0.5, 4.0, -1.25};
  {
    std::jthread peer([&] { ranks[1].all_reduce(std::span(theirs), strata::ReduceOp::sum); });
    ranks[0].all_reduce(std::span(mine), strata::ReduceOp::sum);
  }

  fmt::print("strata {}.{}.{}: all_reduce over {} replicas = {}, over TCP = {} {} {}\n",
             strata::kVersion.major, strata::kVersion.minor, strata::kVersion.patch,
             strategy.num_replicas_in_sync(), sums[0], mine[0], mine[1], mine[2]);
  const bool tcp_ok = mine == std::vector<double>{2.0, 2.0, 2.0} && theirs == mine;
  return sums[0] == 3 && sums[1] == 3 && tcp_ok ? 0 : 1;
}
