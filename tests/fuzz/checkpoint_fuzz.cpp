// libFuzzer entry point for the checkpoint reader; the checks live in
// tests/support/fuzz/checkpoint.hpp. Built and run as tests/CMakeLists.txt says (fuzz a copy of
// the corpus):
//   build/fuzz/strata_fuzz_checkpoint -max_total_time=60 build/fuzz/corpus/checkpoint
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_checkpoint(std::span<const std::uint8_t>(data, size));
  return 0;
}
