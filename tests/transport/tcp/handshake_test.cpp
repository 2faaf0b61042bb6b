// Tests for strata/transport/tcp/handshake.hpp: the Hello message, its decoder, the
// HMAC-SHA256 that proves knowledge of the cluster token, and the status names.
// The MAC is checked against values computed outside strata (Python's hmac module, confirmed
// with `openssl dgst -sha256 -hmac`), so that both sides of a handshake — possibly built from
// different strata versions — keep computing the same MAC.
#include <strata/transport/tcp/handshake.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

namespace {

using strata::transport::tcp::decode;
using strata::transport::tcp::encode;
using strata::transport::tcp::handshake_mac;
using strata::transport::tcp::HandshakeStatus;
using strata::transport::tcp::Hello;
using strata::transport::tcp::HelloBytes;
using strata::transport::tcp::kHelloBytes;
using strata::transport::tcp::kHelloMagic;
using strata::transport::tcp::kMacBytes;
using strata::transport::tcp::kNonceBytes;
using strata::transport::tcp::kProtocolVersion;
using strata::transport::tcp::Mac;
using strata::transport::tcp::random_bytes;
using strata::transport::tcp::same_mac;

static_assert(kHelloBytes == 80);
static_assert(kNonceBytes == 32);
static_assert(kMacBytes == 32);
static_assert(kHelloMagic == 0x48525453);
static_assert(kProtocolVersion == 4);
static_assert(Hello::kHasToken == 1);
// The status travels as one byte: its values must not move.
static_assert(static_cast<int>(HandshakeStatus::accepted) == 0);
static_assert(static_cast<int>(HandshakeStatus::authentication_failed) == 9);
static_assert(static_cast<int>(HandshakeStatus::stale_incarnation) == 10);
static_assert(static_cast<int>(HandshakeStatus::challenge) == 11);

constexpr std::byte b(unsigned value) {
  return static_cast<std::byte>(value);
}

// The Hellos of the known-answer test (the connector is rank 3, the acceptor rank 0).
Hello connector_hello() {
  Hello hello;
  hello.version = 1;
  hello.connection = 2;
  hello.rank = 3;
  hello.world_size = 4;
  hello.flags = Hello::kHasToken;
  hello.cluster = 0x0123456789abcdefULL;
  hello.tunables = 0xfedcba9876543210ULL;
  hello.incarnation = 0x1122334455667788ULL;
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    hello.nonce[i] = b(static_cast<unsigned>(i));  // 00 01 ... 1f
  return hello;
}

Hello acceptor_hello() {
  Hello hello = connector_hello();
  hello.rank = 0;
  hello.incarnation = 0x99aabbccddeeff00ULL;
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    hello.nonce[i] = b(0xa0 + static_cast<unsigned>(i));  // a0 a1 ... bf
  return hello;
}

// A Hello whose fields all differ from what the tests decode, to see that `out` stays as is.
Hello sentinel() {
  Hello hello;
  hello.version = 0x7777;
  hello.connection = 0x6666;
  hello.rank = -5;
  hello.world_size = -6;
  hello.flags = 0;
  hello.cluster = 0x5555555555555555ULL;
  hello.tunables = 0x4444444444444444ULL;
  hello.incarnation = 0x3333333333333333ULL;
  hello.nonce.fill(b(0xEE));
  return hello;
}

HelloBytes from_hex(std::string_view hex) {
  REQUIRE(hex.size() == 2 * kHelloBytes);
  HelloBytes out{};
  for (std::size_t i = 0; i < kHelloBytes; ++i)
    out[i] = b(static_cast<unsigned>(std::stoul(std::string(hex.substr(2 * i, 2)), nullptr, 16)));
  return out;
}

std::string to_hex(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const std::byte x : bytes) {
    out += kDigits[static_cast<unsigned>(x) >> 4];
    out += kDigits[static_cast<unsigned>(x) & 0xF];
  }
  return out;
}

bool decode_into(const HelloBytes& bytes, Hello& out) {
  return decode(std::span<const std::byte, kHelloBytes>(bytes), out);
}

void check_rejected(const HelloBytes& bytes) {
  Hello out = sentinel();
  CHECK_FALSE(decode_into(bytes, out));
  CHECK(out == sentinel());
}

// The two Hellos as Python's struct.pack('<IHHiiIIQQQ', magic, version, connection, rank,
// world_size, flags, 0, cluster, tunables, incarnation) + nonce writes them.
constexpr std::string_view kConnectorHex =
    "53545248"
    "0100"
    "0200"
    "03000000"
    "04000000"
    "01000000"
    "00000000"  // magic ... reserved
    "efcdab8967452301"
    "1032547698badcfe"
    "8877665544332211"  // cluster, tunables, incarnation
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";  // nonce
constexpr std::string_view kAcceptorHex =
    "53545248"
    "0100"
    "0200"
    "00000000"
    "04000000"
    "01000000"
    "00000000"
    "efcdab8967452301"
    "1032547698badcfe"
    "00ffeeddccbbaa99"
    "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf";

TEST_CASE("Hello byte layout") {
  CHECK(to_hex(encode(connector_hello())) == kConnectorHex);
  CHECK(to_hex(encode(acceptor_hello())) == kAcceptorHex);

  // Offsets, one field at a time.
  Hello hello;
  hello.version = 0x0102;
  hello.connection = 0x0304;
  hello.rank = -2;
  hello.world_size = 0x05060708;
  hello.flags = 1;
  hello.cluster = 0x1112131415161718ULL;
  hello.tunables = 0x2122232425262728ULL;
  hello.incarnation = 0x3132333435363738ULL;
  hello.nonce.fill(b(0x99));
  const HelloBytes bytes = encode(hello);
  const std::array<unsigned, 48> head = {
      0x53, 0x54, 0x52, 0x48,                          // 0: magic "STRH"
      0x02, 0x01,                                      // 4: version
      0x04, 0x03,                                      // 6: connection
      0xFE, 0xFF, 0xFF, 0xFF,                          // 8: rank -2
      0x08, 0x07, 0x06, 0x05,                          // 12: world size
      0x01, 0x00, 0x00, 0x00,                          // 16: flags
      0x00, 0x00, 0x00, 0x00,                          // 20: reserved
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // 24: cluster
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // 32: tunables
      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,  // 40: incarnation
  };
  for (std::size_t i = 0; i < head.size(); ++i) {
    CAPTURE(i);
    CHECK(static_cast<unsigned>(bytes[i]) == head[i]);
  }
  for (std::size_t i = head.size(); i < kHelloBytes; ++i)  // 48: nonce
    CHECK(bytes[i] == b(0x99));
}

TEST_CASE("Hello encode/decode round trip") {
  std::vector<Hello> hellos = {Hello{}, connector_hello(), acceptor_hello()};
  Hello extreme;
  extreme.version = 0xFFFF;
  extreme.connection = 0xFFFF;
  extreme.rank = std::numeric_limits<std::int32_t>::min();
  extreme.world_size = std::numeric_limits<std::int32_t>::max();
  extreme.flags = Hello::kHasToken;
  extreme.cluster = ~0ULL;
  extreme.tunables = ~0ULL;
  extreme.incarnation = ~0ULL;
  extreme.nonce.fill(b(0xFF));
  hellos.push_back(extreme);
  Hello negative = extreme;
  negative.rank = -1;
  negative.world_size = std::numeric_limits<std::int32_t>::min();
  negative.flags = 0;
  negative.version = 0;  // decode leaves the version check to the receiver
  hellos.push_back(negative);

  for (const Hello& hello : hellos) {
    CAPTURE(to_hex(encode(hello)));
    Hello out = sentinel();
    const HelloBytes bytes = encode(hello);
    REQUIRE(decode_into(bytes, out));
    CHECK(out == hello);
    CHECK(encode(out) == bytes);
  }
  // The bytes of the known-answer test decode to the Hellos they were made from.
  Hello out = sentinel();
  REQUIRE(decode_into(from_hex(kConnectorHex), out));
  CHECK(out == connector_hello());
  REQUIRE(decode_into(from_hex(kAcceptorHex), out));
  CHECK(out == acceptor_hello());
}

TEST_CASE("Hello decode rejects bytes that are not a Hello, leaving the output untouched") {
  const HelloBytes valid = encode(connector_hello());
  SUBCASE("wrong magic, in any of its four bytes") {
    for (std::size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      HelloBytes bytes = valid;
      bytes[i] ^= b(0x01);
      check_rejected(bytes);
      bytes[i] = b(0);
      check_rejected(bytes);
    }
    // The magic byte-swapped ("HRTS" on the wire) is not the magic.
    HelloBytes swapped = valid;
    std::reverse(swapped.begin(), swapped.begin() + 4);
    check_rejected(swapped);
    check_rejected(HelloBytes{});
  }
  SUBCASE("a nonzero reserved word") {
    for (std::size_t i = 20; i < 24; ++i) {
      for (const unsigned value : {0x01u, 0x80u, 0xFFu}) {
        CAPTURE(i);
        CAPTURE(value);
        HelloBytes bytes = valid;
        bytes[i] = b(value);
        check_rejected(bytes);
      }
    }
  }
  SUBCASE("unknown flag bits") {
    for (unsigned bit = 1; bit < 32; ++bit) {
      CAPTURE(bit);
      Hello hello = connector_hello();
      hello.flags = 1u << bit;
      check_rejected(encode(hello));
      hello.flags |= Hello::kHasToken;
      check_rejected(encode(hello));
    }
    Hello hello = connector_hello();
    hello.flags = 0xFFFFFFFFu;
    check_rejected(encode(hello));
  }
  SUBCASE("the known flag values are accepted") {
    for (const std::uint32_t flags : {0u, Hello::kHasToken}) {
      Hello hello = connector_hello();
      hello.flags = flags;
      Hello out = sentinel();
      CHECK(decode_into(encode(hello), out));
      CHECK(out.flags == flags);
    }
  }
}

// Expected MACs of connector_hello() and acceptor_hello(), computed at development time with
//   import hmac, hashlib
//   msg = label.ljust(16, b'\0') + bytes.fromhex(kConnectorHex) + bytes.fromhex(kAcceptorHex)
//   hmac.new(token, msg, hashlib.sha256).hexdigest()
// (the first one confirmed with `openssl dgst -sha256 -hmac 'correct horse battery staple'`
// over the same 176-byte message). handshake.hpp: HMAC-SHA256(token, label padded with zeros to
// 16 bytes ‖ connector Hello ‖ acceptor Hello).
constexpr std::string_view kToken = "correct horse battery staple";
constexpr std::string_view kConnectMac =  // token kToken, label "strata-connect"
    "66cd2f086c79966ca738274b905af736121ee78d31f6f23a7f93021e2fb33a14";
constexpr std::string_view kAcceptMac =  // token kToken, label "strata-accept"
    "c7ceb14d2cfd1c5c97dc253a53e98669ebdd1f9a1d45145848212cc0c5b00587";
constexpr std::string_view kEmptyTokenMac =  // token "", label "strata-connect"
    "e354c76d1954b0b9d835e5229a7c8ea800296427b32ec9303d426c4d0837b988";
// The connector's answer to a challenge: label "strata-connect", the connector's Hello and the
// acceptor's nonce a0 a1 ... bf (confirmed with `openssl dgst -sha256 -hmac` as well).
constexpr std::string_view kChallengeMac =
    "0436df6d918887cc718140f59e2762bcbc4f50a4127e9d0265ae9fecc2c93910";

TEST_CASE(
    "handshake_mac is HMAC-SHA256(token, label ‖ connector Hello ‖ acceptor Hello or nonce)") {
  const HelloBytes connector = encode(connector_hello());
  const HelloBytes acceptor = encode(acceptor_hello());
  CHECK(to_hex(handshake_mac(kToken, "strata-connect", connector, acceptor)) == kConnectMac);
  CHECK(to_hex(handshake_mac(kToken, "strata-accept", connector, acceptor)) == kAcceptMac);
  // An explicitly empty TcpOptions::cluster_token reaches handshake_mac as "".
  CHECK(to_hex(handshake_mac("", "strata-connect", connector, acceptor)) == kEmptyTokenMac);
  CHECK(to_hex(handshake_mac(std::string_view{}, "strata-connect", connector, acceptor)) ==
        kEmptyTokenMac);
  const std::array<std::byte, kNonceBytes> nonce = acceptor_hello().nonce;
  CHECK(to_hex(handshake_mac(kToken, "strata-connect", connector, nonce)) == kChallengeMac);
  // A MAC never covers more than two Hellos' worth of bytes.
  const std::vector<std::byte> too_long(kHelloBytes + 1);
  CHECK_THROWS_AS(handshake_mac(kToken, "strata-connect", connector, too_long), strata::UsageError);
}

TEST_CASE("the MAC depends on the token, the label and both Hellos") {
  const HelloBytes connector = encode(connector_hello());
  const HelloBytes acceptor = encode(acceptor_hello());
  const Mac base = handshake_mac(kToken, "strata-connect", connector, acceptor);
  CHECK(handshake_mac(kToken, "strata-connect", connector, acceptor) == base);  // deterministic

  std::set<std::string> seen = {to_hex(base)};
  auto differs = [&](const Mac& mac) {
    CHECK(mac != base);
    CHECK_FALSE(same_mac(mac, base));
    seen.insert(to_hex(mac));
  };
  SUBCASE("token") {
    differs(handshake_mac("correct horse battery staplf", "strata-connect", connector, acceptor));
    differs(handshake_mac("correct horse battery stapl", "strata-connect", connector, acceptor));
    differs(handshake_mac("", "strata-connect", connector, acceptor));
    differs(handshake_mac(std::string(200, 'k'), "strata-connect", connector, acceptor));
    CHECK(seen.size() == 5);
  }
  SUBCASE("label") {
    differs(handshake_mac(kToken, "strata-accept", connector, acceptor));
    differs(handshake_mac(kToken, "", connector, acceptor));
    differs(handshake_mac(kToken, "strata-connecT", connector, acceptor));
    CHECK(seen.size() == 4);
  }
  SUBCASE("either Hello, in any byte") {
    for (std::size_t i = 0; i < kHelloBytes; ++i) {
      CAPTURE(i);
      HelloBytes changed = connector;
      changed[i] ^= b(0x01);
      differs(handshake_mac(kToken, "strata-connect", changed, acceptor));
      changed = acceptor;
      changed[i] ^= b(0x80);
      differs(handshake_mac(kToken, "strata-connect", connector, changed));
    }
    CHECK(seen.size() == 1 + 2 * kHelloBytes);
  }
  SUBCASE("the order of the Hellos") {
    differs(handshake_mac(kToken, "strata-connect", acceptor, connector));
  }
}

TEST_CASE("same_mac compares all 32 bytes") {
  Mac a{};
  for (std::size_t i = 0; i < kMacBytes; ++i)
    a[i] = b(static_cast<unsigned>(7 * i + 1));
  const Mac copy = a;
  CHECK(same_mac(a, copy));
  CHECK(same_mac(Mac{}, Mac{}));
  for (std::size_t i = 0; i < kMacBytes; ++i) {
    CAPTURE(i);
    Mac other = a;
    other[i] ^= b(0x01);
    CHECK_FALSE(same_mac(a, other));
    CHECK_FALSE(same_mac(other, a));
    other = a;
    other[i] ^= b(0x80);
    CHECK_FALSE(same_mac(a, other));
  }
  Mac reversed = a;
  std::reverse(reversed.begin(), reversed.end());
  CHECK_FALSE(same_mac(a, reversed));
}

TEST_CASE("random_bytes fills the whole span with fresh values") {
  std::array<std::byte, kNonceBytes> first{};
  std::array<std::byte, kNonceBytes> second{};
  random_bytes(first);
  random_bytes(second);
  // Equal or all-zero 32-byte nonces would happen by chance with probability 2^-256.
  CHECK(first != second);
  CHECK(first != std::array<std::byte, kNonceBytes>{});
  CHECK(second != std::array<std::byte, kNonceBytes>{});

  // 4096 random bytes take (almost) every byte value, and the last byte is written too.
  std::vector<std::byte> many(4096, b(0));
  random_bytes(many);
  const std::set<std::byte> values(many.begin(), many.end());
  CHECK(values.size() >= 240);  // expected: 256 - 3e-5; 240 fails with probability < 1e-30
  std::vector<std::byte> tail(4096, b(0));
  int nonzero_tails = 0;
  for (int round = 0; round < 8; ++round) {
    random_bytes(std::span<std::byte>(tail).subspan(4095));
    if (tail[4095] != b(0)) ++nonzero_tails;
    tail[4095] = b(0);
  }
  CHECK(nonzero_tails >= 1);  // 8 zeros: 2^-64
  CHECK(std::all_of(tail.begin(), tail.end(), [](std::byte x) { return x == b(0); }));

  std::span<std::byte> empty;
  CHECK_NOTHROW(random_bytes(empty));
}

TEST_CASE("to_string(HandshakeStatus) names every status differently") {
  std::set<std::string_view> names;
  for (unsigned value = 0; value <= 11; ++value) {
    CAPTURE(value);
    const std::string_view name = to_string(static_cast<HandshakeStatus>(value));
    CHECK(!name.empty());
    CHECK(name != "invalid status");
    names.insert(name);
  }
  CHECK(names.size() == 12);
  CHECK(to_string(HandshakeStatus::accepted) == "accepted");
  CHECK(to_string(HandshakeStatus::authentication_failed) ==
        "the cluster tokens (STRATA_CLUSTER_TOKEN) differ");
  CHECK(to_string(static_cast<HandshakeStatus>(12)) == "invalid status");
  for (unsigned value = 0; value < 256; ++value)
    CHECK(strata::transport::tcp::is_handshake_status(static_cast<std::byte>(value)) ==
          (value <= 11));
  CHECK(to_string(static_cast<HandshakeStatus>(255)) == "invalid status");
}

}  // namespace
