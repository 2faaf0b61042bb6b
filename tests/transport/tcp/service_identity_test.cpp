// Tests of strata/transport/tcp/service_identity.hpp: which clients a service admits, and the
// verdict bytes it answers them with (decoded back, the MAC recomputed here).
#include <strata/transport/tcp/service_identity.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include <doctest/doctest.h>

namespace {

namespace tcp = strata::transport::tcp;
using tcp::HandshakeStatus;
using tcp::Hello;

const tcp::ServiceIdentity kService{0xC1, 0x7E, 3, 5, {}};

// A client's Hello the service above admits: rank 2 of its 3, on connection index 4.
Hello client_hello() {
  Hello hello;
  hello.connection = 4;
  hello.rank = 2;
  hello.world_size = 3;
  hello.cluster = 0xC1;
  hello.tunables = 0x7E;
  return hello;
}

}  // namespace

TEST_CASE("a service admits its cluster's ranks only, each reason named") {
  CHECK(tcp::judge(client_hello(), kService) == HandshakeStatus::accepted);
  auto with = [](auto change) {
    Hello hello = client_hello();
    change(hello);
    return tcp::judge(hello, kService);
  };
  CHECK(with([](Hello& h) { h.version = tcp::kProtocolVersion + 1; }) ==
        HandshakeStatus::bad_version);
  CHECK(with([](Hello& h) { h.tunables = 0x7F; }) == HandshakeStatus::tunables_differ);
  CHECK(with([](Hello& h) { h.cluster = 0xC2; }) == HandshakeStatus::other_cluster);
  CHECK(with([](Hello& h) { h.world_size = 4; }) == HandshakeStatus::world_size_differs);
  CHECK(with([](Hello& h) { h.rank = 3; }) == HandshakeStatus::unexpected_rank);
  CHECK(with([](Hello& h) { h.rank = -1; }) == HandshakeStatus::unexpected_rank);
  CHECK(with([](Hello& h) { h.flags = Hello::kHasToken; }) == HandshakeStatus::token_unexpected);
  tcp::ServiceIdentity guarded = kService;
  guarded.token = "secret";
  CHECK(tcp::judge(client_hello(), guarded) == HandshakeStatus::token_required);
  Hello proving = client_hello();
  proving.flags = Hello::kHasToken;
  CHECK(tcp::judge(proving, guarded) == HandshakeStatus::accepted);
}

TEST_CASE("the verdict: the status alone, or the service's Hello and with a token its MAC") {
  const Hello theirs = client_hello();
  const tcp::HelloBytes theirs_bytes = tcp::encode(theirs);
  std::array<std::byte, tcp::kNonceBytes> challenge{};
  for (std::size_t i = 0; i < challenge.size(); ++i)
    challenge[i] = std::byte(i * 7 + 1);
  std::array<std::byte, tcp::kVerdictBytes> out{};

  CHECK(tcp::encode_verdict(HandshakeStatus::other_cluster, kService, 9, theirs, theirs_bytes,
                            challenge, out) == 1);
  CHECK(out[0] == std::byte(HandshakeStatus::other_cluster));

  auto decoded_hello = [&out] {
    Hello mine;
    REQUIRE(tcp::decode(
        std::span<const std::byte, tcp::kHelloBytes>(out.data() + 1, tcp::kHelloBytes), mine));
    return mine;
  };
  REQUIRE(tcp::encode_verdict(HandshakeStatus::accepted, kService, 9, theirs, theirs_bytes,
                              challenge, out) == 1 + tcp::kHelloBytes);
  CHECK(out[0] == std::byte(HandshakeStatus::accepted));
  Hello mine = decoded_hello();
  CHECK(mine.connection == 4);
  CHECK(mine.rank == 5);
  CHECK(mine.world_size == 3);
  CHECK(mine.cluster == 0xC1);
  CHECK(mine.tunables == 0x7E);
  CHECK(mine.incarnation == 9);
  CHECK(mine.flags == 0);
  CHECK(mine.nonce == std::array<std::byte, tcp::kNonceBytes>{});

  tcp::ServiceIdentity guarded = kService;
  guarded.token = "secret";
  REQUIRE(tcp::encode_verdict(HandshakeStatus::accepted, guarded, 9, theirs, theirs_bytes,
                              challenge, out) == tcp::kVerdictBytes);
  mine = decoded_hello();
  CHECK(mine.flags == Hello::kHasToken);
  CHECK(mine.nonce == challenge);
  tcp::Mac mac{};
  std::copy_n(out.begin() + 1 + tcp::kHelloBytes, tcp::kMacBytes, mac.begin());
  CHECK(tcp::same_mac(
      mac, tcp::handshake_mac("secret", "strata-accept", theirs_bytes, tcp::encode(mine))));
}
