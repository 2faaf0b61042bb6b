// Two-TU ODR link test, second unit (see odr_a.cpp).
#include <strata/strata.hpp>

float strata_odr_second_unit_roundtrip(float value) {
  return static_cast<float>(strata::float16(value));
}

int strata_odr_second_unit_version_major() {
  return strata::kVersion.major;
}
