// Compile-fail test: a placement whose values live in GPU memory over a communicator of host
// memory. Built with -fsyntax-only: it must fail with the static_assert sentence below, and
// compile when STRATA_COMPILE_FAIL_CONTROL swaps in the host placement.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Placement = strata::placement::Mirrored;
#else
// Stands for a GPU placement in builds without CUDA: it says its values live in device memory.
struct Placement : strata::placement::Mirrored {
  static constexpr bool kDeviceMemory = true;
};
#endif

using Invalid = strata::Strategy<Placement, strata::communicator::LocalCommunicator<>,
                                 strata::sync::Synchronous>;

int main() {
  Invalid strategy({.num_replicas = 2});
  return strategy.num_replicas_in_sync() == 2 ? 0 : 1;
}
