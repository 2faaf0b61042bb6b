// Compile-fail test: a placement that does not say where updates are applied. Built with
// -fsyntax-only: it must fail with the static_assert sentence naming the member, and compile
// when STRATA_COMPILE_FAIL_CONTROL adds it.
#include <string_view>

#include <strata/strategies.hpp>

struct NoUpdateSite : strata::placement::CopyPerReplica {
  static constexpr std::string_view kName = "NoUpdateSite";
  static constexpr int kMaxReplicas = 8;
#ifndef STRATA_COMPILE_FAIL_CONTROL
  static constexpr int kUpdateSite = 0;  // hides the base's: not an UpdateSite
#endif
};

using Invalid = strata::Strategy<NoUpdateSite, strata::communicator::LocalCommunicator<>,
                                 strata::sync::Synchronous>;

int main() {
  Invalid strategy({.num_replicas = 2});
  return strategy.num_replicas_in_sync() == 2 ? 0 : 1;
}
