// Compiled by tools/compile-time: resolving the cluster from the environment.
#include <strata/resolve.hpp>

int main() {
  const auto cluster = strata::resolve_cluster();
  return cluster.rank;
}
