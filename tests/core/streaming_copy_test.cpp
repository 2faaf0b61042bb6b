// core/detail/streaming_copy.hpp against the bytes it was given: sizes around the streaming
// threshold and its 128-byte loop (0, 1, primes, one below, at and above kStreamingBytes,
// megabytes), every alignment of source and destination within a cache line, and no byte written
// outside the destination.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include <strata/core/detail/streaming_copy.hpp>

namespace {

using strata::detail::kStreamingBytes;

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<std::byte> bytes(n);
  for (auto& b : bytes)
    b = static_cast<std::byte>(random());
  return bytes;
}

}  // namespace

TEST_CASE("streaming_copy copies every byte, and only those, at any size and alignment") {
  constexpr std::size_t kGuard = 256;
  constexpr auto kFill = std::byte{0xa5};
  const std::size_t sizes[] = {0,
                               1,
                               7,
                               31,
                               127,
                               129,
                               4099,
                               kStreamingBytes - 1,
                               kStreamingBytes,
                               kStreamingBytes + 1,
                               kStreamingBytes + 97,
                               (std::size_t{3} << 20) + 13};
  unsigned seed = 1;
  for (const std::size_t n : sizes)
    for (const std::size_t from : {0, 1, 13, 32, 63})
      for (const std::size_t to : {0, 3, 16, 31, 60}) {
        CAPTURE(n);
        CAPTURE(from);
        CAPTURE(to);
        const auto source = random_bytes(n + from + 64, seed++);
        std::vector<std::byte> target(n + to + 2 * kGuard, kFill);
        strata::detail::streaming_copy(target.data() + kGuard + to, source.data() + from, n);
        bool same = true;
        for (std::size_t i = 0; i < n && same; ++i)
          same = target[kGuard + to + i] == source[from + i];
        CHECK(same);
        bool untouched = true;
        for (std::size_t i = 0; i < kGuard + to; ++i)
          untouched = untouched && target[i] == kFill;
        for (std::size_t i = kGuard + to + n; i < target.size(); ++i)
          untouched = untouched && target[i] == kFill;
        CHECK(untouched);
      }
}
