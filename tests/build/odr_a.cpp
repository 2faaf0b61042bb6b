// Two-TU ODR link test, first unit: odr_a.cpp and odr_b.cpp both include the whole library.
// A non-inline function or variable defined in a header becomes a duplicate symbol at link
// time; the run checks that both units agree on what they compiled. build_odr_link_mixed
// compiles this unit header-only and odr_b.cpp in the compiled mode, linked with
// strata::compiled: the two modes must coexist in one program.
#include <strata/strata.hpp>

#include <cstdio>

float strata_odr_second_unit_roundtrip(float value);
int strata_odr_second_unit_version_major();
float strata_odr_second_unit_sum(float a, float b);
int strata_odr_second_unit_task_index(const char* tf_config);

namespace {

float sum_here(float a, float b) {
  float out = 0;
  const void* inputs[] = {&a, &b};
  strata::reduce_kernels_of<float>.reduce_n(&out, inputs, 2, 1, strata::ReduceOp::sum);
  return out;
}

}  // namespace

int main() {
  const float here = static_cast<float>(strata::float16(1.5f));
  const float there = strata_odr_second_unit_roundtrip(1.5f);
  if (here != 1.5f || there != here) {
    std::fprintf(stderr, "float16 round trip differs between units: %g vs %g\n", here, there);
    return 1;
  }
  if (sum_here(1.25f, 2.5f) != 3.75f || strata_odr_second_unit_sum(1.25f, 2.5f) != 3.75f) {
    std::fprintf(stderr, "the float kernel table differs between units\n");
    return 1;
  }
  const char* tf_config =
      R"({"cluster":{"worker":["h0:2222","h1:2222"]},"task":{"type":"worker","index":1}})";
  if (strata::cluster::parse_tf_config(tf_config).task->index != 1 ||
      strata_odr_second_unit_task_index(tf_config) != 1) {
    std::fprintf(stderr, "parse_tf_config differs between units\n");
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
