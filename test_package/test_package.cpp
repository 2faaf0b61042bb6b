// Conan's test package: two ranks all-reduce over TCP on 127.0.0.1, checked against the sums.
#include <strata/communicator/tcp.hpp>

#include <cstdio>
#include <span>
#include <thread>
#include <vector>

int main() {
  auto ranks = strata::communicator::TcpCommunicator::create(2);
  std::vector<float> first{1.0f, 2.0f, 3.0f};
  std::vector<float> second{10.0f, 20.0f, 30.0f};
  {
    std::jthread peer([&] { ranks[1].all_reduce(std::span(second), strata::ReduceOp::sum); });
    ranks[0].all_reduce(std::span(first), strata::ReduceOp::sum);
  }
  const auto version = strata::version();
  std::printf("strata %d.%d.%d (cuda %d, nccl %d): all_reduce over 2 TCP ranks = %g %g %g\n",
              version.major, version.minor, version.patch, STRATA_HAS_CUDA, STRATA_HAS_NCCL,
              first[0], first[1], first[2]);
  const std::vector<float> expected{11.0f, 22.0f, 33.0f};
  return first == expected && second == expected ? 0 : 1;
}
