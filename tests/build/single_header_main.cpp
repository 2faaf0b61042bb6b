// Built with single_include/ as the only strata include directory: the amalgamated header is
// complete on its own.
#include <strata/strata.hpp>

#include <cstdio>

int main() {
  const strata::float16 half(1.5f);
  if (static_cast<float>(half) != 1.5f) {
    std::fprintf(stderr, "float16 round trip failed in the single header\n");
    return 1;
  }
  std::printf("strata %d.%d.%d single header works\n", strata::kVersion.major,
              strata::kVersion.minor, strata::kVersion.patch);
  return 0;
}
