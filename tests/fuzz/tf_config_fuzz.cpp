// libFuzzer entry point for parse_tf_config; the checks live in tests/support/fuzz/tf_config.hpp.
// Built and run as tests/CMakeLists.txt says (fuzz a copy of the corpus):
//   build/fuzz/strata_fuzz_tf_config -max_total_time=60 build/fuzz/corpus/tf_config
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/tf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_tf_config(std::span<const std::uint8_t>(data, size));
  return 0;
}
