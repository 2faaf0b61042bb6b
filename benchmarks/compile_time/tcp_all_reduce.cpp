// Compiled by tools/compile-time: a TCP communicator and one float all-reduce.
#include <strata/communicator/tcp.hpp>

#include <span>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  strata::communicator::TcpMembership membership;
  membership.rank = argc > 1 ? argv[1][0] - '0' : 0;
  membership.addresses = {strata::cluster::parse_address("127.0.0.1:29500"),
                          strata::cluster::parse_address("127.0.0.1:29501")};
  strata::communicator::TcpCommunicator comm(std::move(membership));
  std::vector<float> gradients(1024, 1.0f);
  comm.all_reduce(std::span(gradients), strata::ReduceOp::sum);
  return 0;
}
