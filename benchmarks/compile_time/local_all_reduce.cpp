// Compiled by tools/compile-time: one float all-reduce between two in-process replicas.
#include <strata/communicator/local.hpp>

#include <span>
#include <thread>
#include <vector>

int main() {
  auto group = strata::communicator::LocalCommunicator<>::create(2);
  std::vector<float> a(1024, 1.0f), b(1024, 2.0f);
  std::jthread peer([&] { group[1].all_reduce(std::span(b), strata::ReduceOp::sum); });
  group[0].all_reduce(std::span(a), strata::ReduceOp::sum);
  return 0;
}
