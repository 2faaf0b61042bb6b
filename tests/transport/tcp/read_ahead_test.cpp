// Tests of strata/transport/tcp/read_ahead.hpp: bytes received ahead come out in order, in any
// pieces, and the free space is all that is not buffered.
#include <strata/transport/tcp/read_ahead.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::transport::tcp::kReadAhead;
using strata::transport::tcp::ReadAhead;

// Receives `count` bytes numbered from `first` (mod 256) into the buffer's space.
void receive(ReadAhead& ahead, std::size_t first, std::size_t count) {
  const std::span<std::byte> space = ahead.space();
  REQUIRE(space.size() >= count);
  for (std::size_t i = 0; i < count; ++i)
    space[i] = static_cast<std::byte>((first + i) % 256);
  ahead.filled(count);
}

}  // namespace

TEST_CASE("bytes read ahead come out in order, in pieces of any size") {
  ReadAhead ahead;
  CHECK(ahead.buffered() == 0);
  CHECK(ahead.space().size() == kReadAhead);
  std::size_t received = 0;
  std::size_t consumed = 0;
  for (const std::size_t count : {std::size_t{1}, std::size_t{32}, std::size_t{1000}, kReadAhead}) {
    CAPTURE(count);
    const std::size_t n = std::min(count, ahead.space().size());
    receive(ahead, received, n);
    received += n;
    CHECK(ahead.buffered() == received - consumed);
    CHECK(ahead.space().size() == kReadAhead - ahead.buffered());
    // Take some, skip some, leave some.
    std::vector<std::byte> out(ahead.buffered() / 2 + 1);
    const std::size_t taken = ahead.take(out);
    CHECK(taken == std::min(out.size(), received - consumed));
    for (std::size_t i = 0; i < taken; ++i)
      CHECK(out[i] == static_cast<std::byte>((consumed + i) % 256));
    consumed += taken;
    const std::size_t skipped = std::min<std::size_t>(3, ahead.buffered());
    ahead.skip(skipped);
    consumed += skipped;
    REQUIRE(ahead.buffered() == received - consumed);
    if (ahead.buffered() > 0) CHECK(ahead.bytes()[0] == static_cast<std::byte>(consumed % 256));
  }
}

TEST_CASE("taking more than is buffered takes what there is; skipping more skips all") {
  ReadAhead ahead;
  receive(ahead, 0, 10);
  std::vector<std::byte> out(64, std::byte{0xFF});
  CHECK(ahead.take(out) == 10);
  CHECK(out[9] == std::byte{9});
  CHECK(out[10] == std::byte{0xFF});
  CHECK(ahead.take(out) == 0);
  receive(ahead, 0, 5);
  ahead.skip(100);
  CHECK(ahead.buffered() == 0);
  CHECK(ahead.space().size() == kReadAhead);
}
