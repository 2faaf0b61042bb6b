// strata/transport/tcp/growing_payload.hpp — reading a payload whose size a peer claims into a
// buffer that grows with what has arrived, so that a claim of gigabytes followed by a few bytes
// costs memory only for the bytes (the coordinator's requests and replies, a ps create).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace strata::transport::tcp {

/// What a growing payload buffer first holds, in bytes; it then doubles.
inline constexpr std::size_t kFirstPayloadChunk = std::size_t{1} << 16;

/// Grows `buffer` toward `total` elements for the next read (to kFirstPayloadChunk bytes, then
/// doubling) and returns the new part to read into; empty once `buffer` holds `total`.
template <class T>
std::span<std::byte> grow_toward(std::vector<T>& buffer, std::size_t total) {
  const std::size_t have = buffer.size();
  if (have >= total) return {};
  buffer.resize(std::min(total, std::max(kFirstPayloadChunk / sizeof(T), 2 * have)));
  return std::as_writable_bytes(std::span(buffer).subspan(have));
}

}  // namespace strata::transport::tcp
