// Compile-fail test: a communicator that does not bound its group's size. Built with
// -fsyntax-only: it must fail with the static_assert sentence naming `kMaxSize`, and compile
// when STRATA_COMPILE_FAIL_CONTROL keeps the member.
#include <strata/strategies.hpp>

#ifdef STRATA_COMPILE_FAIL_CONTROL
using Communicator = strata::communicator::LocalCommunicator<>;
#else
// Everything of LocalCommunicator but kMaxSize, which a member of another type hides.
struct Communicator : strata::communicator::LocalCommunicator<> {
  struct kMaxSize {};
};
#endif

using Invalid =
    strata::Strategy<strata::placement::Mirrored, Communicator, strata::sync::Synchronous>;

int main() {
  Invalid strategy({.num_replicas = 2});
  return strategy.num_replicas_in_sync() == 2 ? 0 : 1;
}
