// Compile-fail test: Synchronous over parameter servers, which strata does not build (TF1's
// SyncReplicasOptimizer); the sentence says to train them with Asynchronous. Compiles when
// STRATA_COMPILE_FAIL_CONTROL swaps Asynchronous in.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Sync = strata::sync::Asynchronous;
#else
using Sync = strata::sync::Synchronous;
#endif

using Invalid = strata::Strategy<strata::placement::ParameterServer<>,
                                 strata::communicator::LocalCommunicator<>, Sync>;

int main() {
  Invalid strategy({.num_replicas = 1});
  return strategy.num_replicas_in_sync() == 1 ? 0 : 1;
}
