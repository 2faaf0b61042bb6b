// Compiled by tools/compile-time: the cost of including strata and using nothing.
#include <strata/strata.hpp>

int main() {
  return 0;
}
