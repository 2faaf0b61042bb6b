// Compile-fail test: a copy per replica (Mirrored) with a sync policy that does not wait for
// every replica. The policy here is a test double: a near-miss of Synchronous.
#include <string_view>

#include <strata/strategies.hpp>

struct DoesNotWait {
  static constexpr std::string_view kName = "DoesNotWait";
  static constexpr bool kWaitsForAllReplicas = false;
};

#ifdef STRATA_COMPILE_FAIL_CONTROL
// Servers apply each replica's update on their own: a placement that needs no waiting.
using Placement = strata::placement::ParameterServer<>;
#else
using Placement = strata::placement::Mirrored;
#endif

using Invalid = strata::Strategy<Placement, strata::communicator::LocalCommunicator<>, DoesNotWait>;

int main() {
  Invalid strategy({.num_replicas = 2});
  return strategy.num_replicas_in_sync() == 2 ? 0 : 1;
}
