// Compile-fail test: a placement with a copy per replica over a single-replica communicator.
// Built with -fsyntax-only: it must fail with the static_assert sentence below, and compile
// when STRATA_COMPILE_FAIL_CONTROL swaps in the communicator the sentence recommends.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Communicator = strata::communicator::LocalCommunicator<>;
#else
using Communicator = strata::communicator::SelfCommunicator;
#endif

using Invalid =
    strata::Strategy<strata::placement::Mirrored, Communicator, strata::sync::Synchronous>;

int main() {
  Invalid strategy({.num_replicas = 1});
  return strategy.num_replicas_in_sync() == 1 ? 0 : 1;
}
