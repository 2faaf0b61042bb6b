// Compile-fail test: asynchronous training over one copy every replica reads (CentralStorage):
// one replica would write it while the others read. Compiles when STRATA_COMPILE_FAIL_CONTROL
// swaps in the parameter servers the sentence recommends.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Placement = strata::placement::ParameterServer<>;
#else
using Placement = strata::placement::CentralStorage;
#endif

using Invalid = strata::Strategy<Placement, strata::communicator::LocalCommunicator<>,
                                 strata::sync::Asynchronous>;

int main() {
  Invalid strategy({.num_replicas = 2});
  return strategy.num_replicas_in_sync() == 2 ? 0 : 1;
}
