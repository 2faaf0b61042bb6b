// Compile-fail test: a single-replica placement over a communicator between replicas.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Communicator = strata::communicator::SelfCommunicator;
#else
using Communicator = strata::communicator::LocalCommunicator<>;
#endif

using Invalid =
    strata::Strategy<strata::placement::OneDevice, Communicator, strata::sync::Synchronous>;

int main() {
  Invalid strategy;
  return strategy.num_replicas_in_sync() == 1 ? 0 : 1;
}
