// strata/core/detail/fnv1a.hpp — the 64-bit FNV-1a hash behind the cluster and tunables
// fingerprints that ranks compare in their handshake.
#pragma once

#include <cstdint>
#include <string_view>

namespace strata::detail {

/// FNV-1a's 64-bit offset basis: the hash of no bytes.
inline constexpr std::uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

/// `hash` extended by the bytes of `text`: hashing a text in pieces gives the hash of the whole.
constexpr std::uint64_t fnv1a(std::uint64_t hash, std::string_view text) noexcept {
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;  // FNV-1a's 64-bit prime
  }
  return hash;
}

}  // namespace strata::detail
