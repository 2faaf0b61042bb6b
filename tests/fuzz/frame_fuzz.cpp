// libFuzzer entry point for the TCP frame header and Hello decoders; the checks live in
// tests/support/fuzz/frame.hpp.
//   build/fuzz/tests/strata_fuzz_frame -max_total_time=60 tests/fuzz/corpus/frame
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_frame(std::span<const std::uint8_t>(data, size));
  return 0;
}
