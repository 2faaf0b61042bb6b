// Two-TU ODR link test, second unit (see odr_a.cpp).
#include <strata/strata.hpp>

float strata_odr_second_unit_roundtrip(float value) {
  return static_cast<float>(strata::float16(value));
}

int strata_odr_second_unit_version_major() {
  return strata::kVersion.major;
}

float strata_odr_second_unit_sum(float a, float b) {
  float out = 0;
  const void* inputs[] = {&a, &b};
  strata::reduce_kernels_of<float>.reduce_n(&out, inputs, 2, 1, strata::ReduceOp::sum);
  return out;
}

int strata_odr_second_unit_task_index(const char* tf_config) {
  return strata::cluster::parse_tf_config(tf_config).task->index;
}
