// transport/tcp/growing_payload.hpp: the parts a claimed payload is read in, element by element.
#include <strata/transport/tcp/growing_payload.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

using strata::transport::tcp::grow_toward;
using strata::transport::tcp::kFirstPayloadChunk;

TEST_CASE("a growing payload is read in parts of 64 KiB, then doubling, up to its total") {
  for (const std::size_t total : {std::size_t{0}, std::size_t{1}, std::size_t{65535},
                                  std::size_t{65536}, std::size_t{65537}, std::size_t{1000003}}) {
    CAPTURE(total);
    std::vector<std::byte> buffer;
    std::vector<std::size_t> parts;
    std::uint8_t next = 0;
    for (auto part = grow_toward(buffer, total); !part.empty(); part = grow_toward(buffer, total)) {
      CHECK(part.data() == buffer.data() + (buffer.size() - part.size()));
      for (auto& b : part)
        b = std::byte{next++};
      parts.push_back(part.size());
    }
    std::vector<std::byte> written(total);  // every part kept where it was read
    for (std::size_t i = 0; i < total; ++i)
      written[i] = std::byte{static_cast<std::uint8_t>(i)};
    CHECK(buffer == written);
    // 64 KiB first, then the buffer doubles: each part is what came before, until the total.
    std::size_t have = 0;
    for (const std::size_t part : parts) {
      const std::size_t expected = have == 0 ? kFirstPayloadChunk : have;
      CHECK(part == std::min(expected, total - have));
      have += part;
    }
  }
}

TEST_CASE("a growing payload of wider elements counts its first part in bytes") {
  std::vector<double> values;
  const auto first = grow_toward(values, 100000);
  CHECK(first.size() == kFirstPayloadChunk);
  CHECK(values.size() == kFirstPayloadChunk / sizeof(double));
  const auto second = grow_toward(values, 100000);
  CHECK(second.size() == kFirstPayloadChunk);
  CHECK(grow_toward(values, values.size()).empty());
}
