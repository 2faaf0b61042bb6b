// libFuzzer entry point for parse_tf_config; the checks live in tests/support/fuzz/tf_config.hpp.
//   build/fuzz/tests/strata_fuzz_tf_config -max_total_time=60 tests/fuzz/corpus/tf_config
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/tf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_tf_config(std::span<const std::uint8_t>(data, size));
  return 0;
}
