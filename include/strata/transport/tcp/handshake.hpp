// strata/transport/tcp/handshake.hpp — what two ranks say before they trust a connection.
//
// The rank with the higher number connects; the lower one accepts. The acceptor says nothing
// until it has checked what the connector sent, so a probe learns nothing it did not bring:
//
//   connector → acceptor   Hello_c  (its rank, world size, cluster fingerprint, tunables,
//                                    incarnation, connection index, nonce_c)
//   With a cluster token (STRATA_CLUSTER_TOKEN) on the acceptor, the token is proven first:
//   acceptor → connector   Status challenge + nonce_a (32 random bytes)
//   connector → acceptor   MAC_c = HMAC(token, "strata-connect" ‖ Hello_c ‖ nonce_a)
//   Then, or at once without a token:
//   acceptor → connector   Status: accepted + Hello_a (+ MAC_a with a token), or why not
//   connector → acceptor   Status: accepted, or why the connector refuses the acceptor
//
// Hello layout (80 bytes, little-endian): magic u32 "STRH" @0 | version u16 @4 | connection
// u16 @6 | rank i32 @8 | world size i32 @12 | flags u32 @16 | reserved u32 (0) @20 | cluster
// fingerprint u64 @24 | tunables u64 @32 | incarnation u64 @40 | nonce 32 bytes @48. A Status
// is one byte (HandshakeStatus); after a refusal the acceptor closes the connection.
// MAC_a = HMAC(token, "strata-accept" ‖ Hello_c ‖ Hello_a), and Hello_a carries nonce_a.
//
// Before the challenge the acceptor answers only the protocol version and whether both sides
// hold a token; after it (or without a token) it checks the cluster fingerprint (a hash of the
// cluster spec: ranks given different clusters never pair up), world size, rank and tunables
// (chunk size, connections per peer, algorithm choice: ranks that would cut messages
// differently are refused up front), and the connector checks the same of the acceptor's
// Hello. The nonces make both MACs fresh, so a recorded handshake cannot be replayed, and the
// token itself never crosses the wire.
//
// Once a rank holds every connection of its mesh it sends kMeshReady on each control
// connection, and it starts collectives only after every peer's kMeshReady has arrived (see
// pending_mesh.hpp).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <strata/core/error.hpp>
#include <strata/transport/tcp/frame.hpp>

namespace strata::transport::tcp {

inline constexpr std::uint32_t kHelloMagic = 0x48525453;  // "STRH"
// 4 since the acceptor checks the connector (and its token) before it answers with its own
// Hello; 3 since frames carry lending (frame.hpp version 2).
inline constexpr std::uint16_t kProtocolVersion = 4;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kHelloBytes = 80;
/// Sent once on every control connection by a rank whose mesh is complete.
inline constexpr std::byte kMeshReady{0x52};  // 'R'
/// How long one connection may take over its handshake (capped by the group's deadline), so a
/// silent one cannot hold resources until the deadline.
inline constexpr std::chrono::seconds kHandshakeTimeout{10};

struct Hello {
  std::uint16_t version = kProtocolVersion;
  std::uint16_t connection = 0;  ///< 0: control connection; 1..K: data connections
  std::int32_t rank = 0;
  std::int32_t world_size = 0;
  std::uint32_t flags = 0;  ///< kHasToken when the sender has a cluster token
  std::uint64_t cluster = 0;
  std::uint64_t tunables = 0;
  std::uint64_t incarnation = 0;
  std::array<std::byte, kNonceBytes> nonce{};

  static constexpr std::uint32_t kHasToken = 1;
  friend bool operator==(const Hello&, const Hello&) = default;
};

using HelloBytes = std::array<std::byte, kHelloBytes>;
using Mac = std::array<std::byte, kMacBytes>;

/// The acceptor's verdict on a connection.
enum class HandshakeStatus : std::uint8_t {
  accepted = 0,
  bad_version = 1,
  other_cluster = 2,
  world_size_differs = 3,
  unexpected_rank = 4,
  duplicate_connection = 5,
  tunables_differ = 6,
  token_required = 7,
  token_unexpected = 8,
  authentication_failed = 9,
  stale_incarnation = 10,
  challenge = 11,  ///< not a verdict: prove the cluster token over the nonce that follows
};

/// Whether `value` is a status this protocol version sends.
inline bool is_handshake_status(std::byte value) noexcept {
  return static_cast<unsigned>(value) <= 11;
}

inline std::string_view to_string(HandshakeStatus status) noexcept {
  switch (status) {
    case HandshakeStatus::accepted:
      return "accepted";
    case HandshakeStatus::bad_version:
      return "the ranks run different strata protocol versions";
    case HandshakeStatus::other_cluster:
      return "the ranks were given different cluster specs (cluster fingerprints differ)";
    case HandshakeStatus::world_size_differs:
      return "the ranks disagree on the world size";
    case HandshakeStatus::unexpected_rank:
      return "the rank is not one this rank expects to connect";
    case HandshakeStatus::duplicate_connection:
      return "this rank is already connected";
    case HandshakeStatus::tunables_differ:
      return "the ranks use different TCP tunables (chunk_bytes, connections_per_peer or "
             "algorithm choice)";
    case HandshakeStatus::token_required:
      return "the acceptor requires a cluster token (STRATA_CLUSTER_TOKEN) and the connector "
             "has none";
    case HandshakeStatus::token_unexpected:
      return "the connector has a cluster token (STRATA_CLUSTER_TOKEN) and the acceptor has none";
    case HandshakeStatus::authentication_failed:
      return "the cluster tokens (STRATA_CLUSTER_TOKEN) differ";
    case HandshakeStatus::stale_incarnation:
      return "another incarnation of this rank is already connected";
    case HandshakeStatus::challenge:
      return "the acceptor asks for proof of the cluster token (STRATA_CLUSTER_TOKEN)";
  }
  return "invalid status";
}

inline HelloBytes encode(const Hello& hello) noexcept {
  HelloBytes out{};
  detail::store_le<std::uint32_t>(&out[0], kHelloMagic);
  detail::store_le<std::uint16_t>(&out[4], hello.version);
  detail::store_le<std::uint16_t>(&out[6], hello.connection);
  detail::store_le<std::uint32_t>(&out[8], static_cast<std::uint32_t>(hello.rank));
  detail::store_le<std::uint32_t>(&out[12], static_cast<std::uint32_t>(hello.world_size));
  detail::store_le<std::uint32_t>(&out[16], hello.flags);
  detail::store_le<std::uint32_t>(&out[20], 0);
  detail::store_le<std::uint64_t>(&out[24], hello.cluster);
  detail::store_le<std::uint64_t>(&out[32], hello.tunables);
  detail::store_le<std::uint64_t>(&out[40], hello.incarnation);
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    out[48 + i] = hello.nonce[i];
  return out;
}

/// Decodes a Hello; false when the bytes are not one (wrong magic, reserved bits set). Field
/// values are checked by the receiver against its own view.
inline bool decode(std::span<const std::byte, kHelloBytes> in, Hello& out) noexcept {
  if (detail::load_le<std::uint32_t>(&in[0]) != kHelloMagic) return false;
  if (detail::load_le<std::uint32_t>(&in[20]) != 0) return false;
  Hello hello;
  hello.version = detail::load_le<std::uint16_t>(&in[4]);
  hello.connection = detail::load_le<std::uint16_t>(&in[6]);
  hello.rank = static_cast<std::int32_t>(detail::load_le<std::uint32_t>(&in[8]));
  hello.world_size = static_cast<std::int32_t>(detail::load_le<std::uint32_t>(&in[12]));
  hello.flags = detail::load_le<std::uint32_t>(&in[16]);
  if ((hello.flags & ~Hello::kHasToken) != 0) return false;
  hello.cluster = detail::load_le<std::uint64_t>(&in[24]);
  hello.tunables = detail::load_le<std::uint64_t>(&in[32]);
  hello.incarnation = detail::load_le<std::uint64_t>(&in[40]);
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    hello.nonce[i] = in[48 + i];
  out = hello;
  return true;
}

/// Fills `out` with cryptographically random bytes (nonces, incarnation ids).
/// @throws ConfigurationError when the system has no entropy to give.
inline void random_bytes(std::span<std::byte> out) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) != 1)
    throw ConfigurationError(-1, "handshake", "OpenSSL's RAND_bytes failed",
                             "check that the system's random source (/dev/urandom) is available");
}

/// HMAC-SHA256(token, label ‖ first ‖ second); the label is zero-padded to 16 bytes (labels
/// are short ASCII constants without NUL). The handshake MACs the connector's Hello followed by
/// the acceptor's challenge nonce (MAC_c) or by the acceptor's Hello (MAC_a).
inline Mac handshake_mac(std::string_view token, std::string_view label,
                         std::span<const std::byte> first, std::span<const std::byte> second) {
  std::array<unsigned char, 16 + 2 * kHelloBytes> message{};
  if (first.size() + second.size() > message.size() - 16)
    throw UsageError(-1, "handshake", "a handshake MAC covers at most two Hellos",
                     "MAC a Hello with a nonce or with another Hello");
  std::size_t n = 0;
  for (char c : label.substr(0, 16))
    message[n++] = static_cast<unsigned char>(c);
  n = 16;
  for (std::byte b : first)
    message[n++] = static_cast<unsigned char>(b);
  for (std::byte b : second)
    message[n++] = static_cast<unsigned char>(b);
  Mac mac{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), message.data(), n,
           reinterpret_cast<unsigned char*>(mac.data()), &length) == nullptr ||
      length != kMacBytes)
    throw ConfigurationError(-1, "handshake", "OpenSSL's HMAC-SHA256 failed",
                             "check the OpenSSL installation (libcrypto)");
  return mac;
}

/// Constant-time comparison: a timing side channel must not reveal how much of a MAC matched.
inline bool same_mac(const Mac& a, const Mac& b) noexcept {
  return CRYPTO_memcmp(a.data(), b.data(), kMacBytes) == 0;
}

}  // namespace strata::transport::tcp
