// Compiled, not run, by build_kernel_instantiations: a unit that reduces float gradients (one
// call and in buckets) and moves other types without reducing them must compile the float
// kernels, and the 16-bit ones the buckets' compression reduces with, and no others.
#include <strata/communicator/hierarchical.hpp>
#include <strata/communicator/local.hpp>
#include <strata/fusion/gradient_buckets.hpp>

#include <cstdint>
#include <span>
#include <vector>

using Local = strata::communicator::LocalCommunicator<>;

void reduce_floats(Local& comm, std::vector<float>& a, std::vector<float>& b) {
  comm.all_reduce(std::span(a), strata::ReduceOp::sum);
  strata::fusion::GradientBuckets<Local> buckets(
      comm, {strata::fusion::gradient(std::span(a)), strata::fusion::gradient(std::span(b))});
  buckets.ready(0);
  buckets.ready(1);
  buckets.wait();
}

void move_others(Local& comm, std::vector<std::int64_t>& seeds, std::vector<double>& values,
                 std::vector<std::uint8_t>& bytes) {
  comm.broadcast(std::span(seeds), 0);
  comm.all_gather(std::span<const double>(values.data(), 1), std::span(values));
  comm.broadcast_async(std::span(bytes), 0).wait();
}

auto make_hierarchy(Local inter) {
  return strata::communicator::HierarchicalCommunicator<Local>::create(2, std::move(inter), {},
                                                                       true);
}
