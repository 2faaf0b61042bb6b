// A consumer of an installed strata: find_package(strata), the umbrella header, and a real
// two-replica all-reduce through a strategy.
#include <strata/strata.hpp>

#include <fmt/format.h>

int main() {
  strata::MirroredStrategy strategy({.num_replicas = 2});
  auto sums = strategy.run([](auto& replica) {
    return replica.all_reduce(strata::ReduceOp::sum, replica.replica_id_in_sync_group() + 1);
  });
  fmt::print("strata {}.{}.{}: all_reduce over {} replicas = {}\n", strata::kVersion.major,
             strata::kVersion.minor, strata::kVersion.patch, strategy.num_replicas_in_sync(),
             sums[0]);
  return sums[0] == 3 && sums[1] == 3 ? 0 : 1;
}
