// Compile-fail test: local SGD over parameter servers, where there are no per-replica copies to
// average. Compiles when STRATA_COMPILE_FAIL_CONTROL swaps in the Mirrored placement the
// sentence recommends.
#include <span>
#include <vector>

#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Placement = strata::placement::Mirrored;
#else
using Placement = strata::placement::ParameterServer<>;
#endif

using Invalid = strata::Strategy<Placement, strata::communicator::LocalCommunicator<>,
                                 strata::sync::LocalSgd<4>>;

int main() {
  Invalid strategy({.num_replicas = 2});
  auto w = strategy.create_variable<float>(std::vector<float>{1.0f});
  strategy.run([&](auto& ctx) {
    std::vector<float> g{1.0f};
    ctx.apply_gradients(strata::optim::Sgd{}, std::span(g), w);
  });
  return 0;
}
