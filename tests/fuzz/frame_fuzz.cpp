// libFuzzer entry point for the TCP frame header and Hello decoders; the checks live in
// tests/support/fuzz/frame.hpp.
// Built and run as tests/CMakeLists.txt says (fuzz a copy of the corpus):
//   build/fuzz/strata_fuzz_frame -max_total_time=60 build/fuzz/corpus/frame
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_frame(std::span<const std::uint8_t>(data, size));
  return 0;
}
