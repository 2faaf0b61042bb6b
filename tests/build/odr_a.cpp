// Two-TU ODR link test, first unit: odr_a.cpp and odr_b.cpp both include the whole library.
// A non-inline function or variable defined in a header becomes a duplicate symbol at link
// time; the run checks that both units agree on what they compiled.
#include <strata/strata.hpp>

#include <cstdio>

float strata_odr_second_unit_roundtrip(float value);
int strata_odr_second_unit_version_major();

int main() {
  const float here = static_cast<float>(strata::float16(1.5f));
  const float there = strata_odr_second_unit_roundtrip(1.5f);
  if (here != 1.5f || there != here) {
    std::fprintf(stderr, "float16 round trip differs between units: %g vs %g\n", here, there);
    return 1;
  }
  if (strata_odr_second_unit_version_major() != strata::kVersion.major) {
    std::fprintf(stderr, "strata::kVersion differs between units\n");
    return 1;
  }
  std::printf("strata %d.%d.%d: two translation units link and agree\n", strata::kVersion.major,
              strata::kVersion.minor, strata::kVersion.patch);
  return 0;
}
