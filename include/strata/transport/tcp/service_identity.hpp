// strata/transport/tcp/service_identity.hpp — who may connect to a service, and what the
// service answers them in the handshake (handshake.hpp): the admission rule and the accepting
// side's verdict bytes. The service (service_server.hpp) judges with them; its clients
// (service_client.hpp) name themselves with the same identity.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <strata/transport/tcp/handshake.hpp>

namespace strata::transport::tcp {

/// Who may connect to a service, as the handshake checks it: clients are ranks
/// [0, group_size) of the cluster with fingerprint `cluster`, speaking `tunables`, proving
/// `token` when there is one. `rank` is the service's own identity in its Hello.
struct ServiceIdentity {
  std::uint64_t cluster = 0;
  std::uint64_t tunables = 0;
  int group_size = 0;
  int rank = 0;
  std::optional<std::string> token{};
};

/// The service's verdict on a client's Hello (with a token, once the client has proven it).
inline HandshakeStatus judge(const Hello& theirs, const ServiceIdentity& service) noexcept {
  if (theirs.version != kProtocolVersion) return HandshakeStatus::bad_version;
  if (theirs.tunables != service.tunables) return HandshakeStatus::tunables_differ;
  if (theirs.cluster != service.cluster) return HandshakeStatus::other_cluster;
  if (theirs.world_size != service.group_size) return HandshakeStatus::world_size_differs;
  if (theirs.rank < 0 || theirs.rank >= service.group_size) return HandshakeStatus::unexpected_rank;
  const bool has_token = (theirs.flags & Hello::kHasToken) != 0;
  if (service.token && !has_token) return HandshakeStatus::token_required;
  if (!service.token && has_token) return HandshakeStatus::token_unexpected;
  return HandshakeStatus::accepted;
}

/// The most a verdict takes: its status, the service's Hello and, with a token, its MAC.
inline constexpr std::size_t kVerdictBytes = 1 + kHelloBytes + kMacBytes;

/// Writes the verdict `status` on the client whose Hello arrived as `theirs_bytes` (decoded:
/// `theirs`) into `out` and returns its length: the status alone, or when accepted the service's
/// Hello too (on the client's connection index, with `incarnation`; with a token, echoing the
/// `challenge` the client proved and followed by the MAC that proves the service knows it).
inline std::size_t encode_verdict(HandshakeStatus status, const ServiceIdentity& service,
                                  std::uint64_t incarnation, const Hello& theirs,
                                  const HelloBytes& theirs_bytes,
                                  const std::array<std::byte, kNonceBytes>& challenge,
                                  std::span<std::byte, kVerdictBytes> out) {
  out[0] = static_cast<std::byte>(status);
  if (status != HandshakeStatus::accepted) return 1;
  Hello mine;
  mine.connection = theirs.connection;
  mine.rank = service.rank;
  mine.world_size = service.group_size;
  mine.flags = service.token ? Hello::kHasToken : 0;
  mine.cluster = service.cluster;
  mine.tunables = service.tunables;
  mine.incarnation = incarnation;
  if (service.token) mine.nonce = challenge;
  const HelloBytes mine_bytes = encode(mine);
  std::copy(mine_bytes.begin(), mine_bytes.end(), out.begin() + 1);
  if (!service.token) return 1 + kHelloBytes;
  const Mac mac = handshake_mac(*service.token, "strata-accept", theirs_bytes, mine_bytes);
  std::copy(mac.begin(), mac.end(), out.begin() + 1 + kHelloBytes);
  return kVerdictBytes;
}

}  // namespace strata::transport::tcp
