// strata/core/detail/little_endian.hpp — integers as little-endian bytes, whatever the host's
// order: every strata wire format (frames, handshakes, parameter-server payloads) uses it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace strata::detail {

template <class U>
constexpr void store_le(std::byte* out, U value) noexcept {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    out[i] = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xFF);
}

template <class U>
constexpr U load_le(const std::byte* in) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i)
    value |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return static_cast<U>(value);
}

}  // namespace strata::detail
