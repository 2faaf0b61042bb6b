// libFuzzer entry point for what a parameter server does with push prefixes and create specs;
// the checks live in tests/support/fuzz/ps_shard.hpp.
// Built and run as tests/CMakeLists.txt says (fuzz a copy of the corpus):
//   build/fuzz/strata_fuzz_ps_shard -max_total_time=60 build/fuzz/corpus/ps_shard
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/ps_shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  strata::testing::fuzz_ps_shard(std::span<const std::uint8_t>(data, size));
  return 0;
}
