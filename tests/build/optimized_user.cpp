// Compiled (never run) by build_headers_optimized_<compiler> at -O3 -Wall -Wextra -Wpedantic
// -Werror, as a user compiles strata: it includes everything and instantiates what a trainer
// uses, so that warnings that only appear when optimized code is generated (g++'s
// -Warray-bounds, -Wstringop-overflow, -Wmaybe-uninitialized) are seen here first.
#include <strata/strata.hpp>

#include <cstdint>
#include <span>
#include <vector>

#include "logistic_regression.hpp"

namespace {

template <class Communicator, class T>
void every_collective(Communicator& comm, std::vector<T>& data) {
  const std::span<T> all(data);
  const std::span<const T> in(data);
  const auto n = static_cast<std::size_t>(comm.size());
  for (const strata::ReduceOp op : strata::kAllReduceOps) {
    comm.all_reduce(all, op);
    comm.reduce(in, all, op, 0);
    comm.reduce_scatter(all, op);
  }
  comm.broadcast(all, 0);
  comm.all_gather(in.first(data.size() / n), all);
  comm.all_reduce_async(all, strata::ReduceOp::sum).wait();
  comm.barrier();
}

template <class Communicator>
void every_type(Communicator& comm) {
  std::vector<std::int8_t> i8(64);
  std::vector<std::uint8_t> u8(64);
  std::vector<std::int32_t> i32(64);
  std::vector<std::int64_t> i64(64);
  std::vector<strata::float16> f16(64);
  std::vector<strata::bfloat16> bf16(64);
  std::vector<float> f32(64);
  std::vector<double> f64(64);
  every_collective(comm, i8);
  every_collective(comm, u8);
  every_collective(comm, i32);
  every_collective(comm, i64);
  every_collective(comm, f16);
  every_collective(comm, bf16);
  every_collective(comm, f32);
  every_collective(comm, f64);
}

template <class Strategy>
void train(Strategy& strategy) {
  const auto problem = example::make_problem(256, 4);
  example::train(strategy, problem, example::TrainConfig{}, [](std::size_t, double) {});
}

}  // namespace

void strata_optimized_user(int which) {
  switch (which) {
    case 0: {
      auto resolved = strata::resolve_cluster();
      strata::communicator::TcpCommunicator tcp(strata::communicator::membership_of(resolved));
      every_type(tcp);
      break;
    }
    case 1: {
      auto locals = strata::communicator::LocalCommunicator<>::create(2);
      every_type(locals.front());
      break;
    }
    case 2: {
      strata::MultiWorkerMirroredStrategy strategy;
      train(strategy);
      strategy.run([](auto& replica) { every_type(replica.communicator()); });
      break;
    }
    case 3: {
      strata::MirroredStrategy mirrored;
      strata::CentralStorageStrategy central;
      strata::OneDeviceStrategy one;
      train(mirrored);
      train(central);
      train(one);
      break;
    }
    default:
      break;
  }
}
