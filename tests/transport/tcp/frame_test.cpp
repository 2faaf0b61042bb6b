// Tests for strata/transport/tcp/frame.hpp: the 32-byte header in front of every message.
// The byte layout is checked against arrays built by hand from the table at the top of
// frame.hpp, so that a change of the wire format cannot pass unnoticed; every FrameError is
// produced from a valid header changed in one field, and must leave the output untouched.
#include <strata/transport/tcp/frame.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

#include "fuzz/frame.hpp"

namespace {

using strata::Collective;
using strata::DataType;
using strata::ReduceOp;
using strata::transport::tcp::decode;
using strata::transport::tcp::encode;
using strata::transport::tcp::FailureClass;
using strata::transport::tcp::FrameBytes;
using strata::transport::tcp::FrameError;
using strata::transport::tcp::FrameFlag;
using strata::transport::tcp::FrameHeader;
using strata::transport::tcp::FrameType;
using strata::transport::tcp::kFrameHeaderBytes;
using strata::transport::tcp::kFrameMagic;
using strata::transport::tcp::kFrameVersion;
using strata::transport::tcp::kMaxControlPayload;

constexpr std::uint32_t kNoLimit = std::numeric_limits<std::uint32_t>::max();

constexpr std::array kFrameTypes = {FrameType::data,  FrameType::abort,   FrameType::timeout_notice,
                                    FrameType::alive, FrameType::goodbye, FrameType::release};
constexpr std::array kCollectives = {Collective::all_reduce,     Collective::broadcast,
                                     Collective::reduce,         Collective::all_gather,
                                     Collective::reduce_scatter, Collective::barrier};
constexpr std::array kDataTypes = {DataType::int8,    DataType::uint8,   DataType::int32,
                                   DataType::int64,   DataType::float16, DataType::bfloat16,
                                   DataType::float32, DataType::float64};
constexpr std::array kOps = {ReduceOp::sum, ReduceOp::product, ReduceOp::min, ReduceOp::max,
                             ReduceOp::mean};
constexpr std::array kFrameErrors = {FrameError::bad_magic,        FrameError::bad_version,
                                     FrameError::bad_type,         FrameError::bad_collective,
                                     FrameError::bad_element_type, FrameError::bad_op,
                                     FrameError::bad_flags,        FrameError::payload_too_large};

static_assert(kFrameHeaderBytes == 32);
static_assert(std::is_same_v<FrameBytes, std::array<std::byte, 32>>);
static_assert(kFrameMagic == 0x5346);
static_assert(kFrameVersion == 2);
static_assert(kMaxControlPayload == 4096);
static_assert(std::is_error_code_enum_v<FrameError>);
// The enum values are on the wire: they must not move.
static_assert(static_cast<int>(FrameType::data) == 1 && static_cast<int>(FrameType::abort) == 2 &&
              static_cast<int>(FrameType::timeout_notice) == 3 &&
              static_cast<int>(FrameType::alive) == 4 &&
              static_cast<int>(FrameType::goodbye) == 5 &&
              static_cast<int>(FrameType::release) == 6);
static_assert(static_cast<int>(FrameFlag::lent) == 1);
static_assert(static_cast<int>(FailureClass::peer_failure) == 1 &&
              static_cast<int>(FailureClass::mismatch) == 2 &&
              static_cast<int>(FailureClass::timeout) == 3);
static_assert(static_cast<int>(Collective::barrier) == 5);
static_assert(static_cast<int>(DataType::float64) == 7);
static_assert(static_cast<int>(ReduceOp::mean) == 4);

// A header whose fields all differ from what the tests decode, to see that `out` stays as is
// (the fuzz target's).
constexpr FrameHeader kSentinel = strata::testing::fuzz_detail::kFrameSentinel;

constexpr std::byte b(unsigned value) {
  return static_cast<std::byte>(value);
}

// The header of the layout test, and its bytes written out by hand from frame.hpp's table.
constexpr FrameHeader kLayoutHeader{FrameType::data,
                                    Collective::all_gather,  // 3
                                    DataType::bfloat16,      // 5
                                    ReduceOp::max,           // 3
                                    0x0A0B0C0D,
                                    0x11223344u,
                                    0x0102030405060708ULL,
                                    0x8877665544332211ULL};
constexpr FrameBytes kLayoutBytes = {
    b(0x46), b(0x53),                    // 0: magic 0x5346, low byte first
    b(0x02),                             // 2: version
    b(0x01),                             // 3: type data
    b(0x03),                             // 4: collective all_gather
    b(0x05),                             // 5: element type bfloat16
    b(0x03),                             // 6: op max
    b(0x00),                             // 7: flags
    b(0x0D), b(0x0C), b(0x0B), b(0x0A),  // 8: root
    b(0x44), b(0x33), b(0x22), b(0x11),  // 12: payload bytes
    b(0x08), b(0x07), b(0x06), b(0x05),  // 16: sequence
    b(0x04), b(0x03), b(0x02), b(0x01),  //
    b(0x11), b(0x22), b(0x33), b(0x44),  // 24: count
    b(0x55), b(0x66), b(0x77), b(0x88),  //
};
// encode is constexpr: the layout is checked at compile time too.
static_assert(encode(kLayoutHeader) == kLayoutBytes);

std::error_code decode_into(const FrameBytes& bytes, FrameHeader& out, std::uint32_t limit) {
  return decode(std::span<const std::byte, kFrameHeaderBytes>(bytes), out, limit);
}

void check_round_trip(const FrameHeader& header, std::uint32_t max_payload) {
  CAPTURE(static_cast<int>(header.type));
  CAPTURE(static_cast<int>(header.kind));
  CAPTURE(static_cast<int>(header.element_type));
  CAPTURE(static_cast<int>(header.op));
  CAPTURE(header.root);
  CAPTURE(header.payload_bytes);
  CAPTURE(header.sequence);
  CAPTURE(header.count);
  const FrameBytes bytes = encode(header);
  FrameHeader decoded = kSentinel;
  const std::error_code ec = decode_into(bytes, decoded, max_payload);
  CHECK_MESSAGE(!ec, ec.message());
  CHECK(decoded == header);
  CHECK(encode(decoded) == bytes);
}

// Decodes `bytes` (which must be rejected with `expected`) and checks that `out` is untouched.
void check_rejected(const FrameBytes& bytes, std::uint32_t max_payload, FrameError expected) {
  FrameHeader out = kSentinel;
  const std::error_code ec = decode_into(bytes, out, max_payload);
  CHECK(ec == expected);
  CHECK(ec.category() == strata::transport::tcp::frame_category());
  CHECK(out == kSentinel);
}

FrameBytes with_byte(FrameBytes bytes, std::size_t offset, unsigned value) {
  bytes[offset] = b(value);
  return bytes;
}

FrameBytes with_payload(FrameBytes bytes, std::uint32_t payload) {
  for (std::size_t i = 0; i < 4; ++i)
    bytes[12 + i] = b((payload >> (8 * i)) & 0xFF);
  return bytes;
}

TEST_CASE("the byte layout matches the table in frame.hpp") {
  CHECK(encode(kLayoutHeader) == kLayoutBytes);

  FrameHeader decoded = kSentinel;
  REQUIRE(!decode_into(kLayoutBytes, decoded, kNoLimit));
  CHECK(decoded == kLayoutHeader);

  SUBCASE("the magic reads 0x5346 little-endian") {
    CHECK(static_cast<unsigned>(kLayoutBytes[0]) == (kFrameMagic & 0xFF));
    CHECK(static_cast<unsigned>(kLayoutBytes[1]) == (kFrameMagic >> 8));
  }
  SUBCASE("a negative root is its two's complement, low byte first") {
    FrameHeader header = kLayoutHeader;
    header.root = -2;
    const FrameBytes bytes = encode(header);
    CHECK(bytes[8] == b(0xFE));
    CHECK(bytes[9] == b(0xFF));
    CHECK(bytes[10] == b(0xFF));
    CHECK(bytes[11] == b(0xFF));
    header.root = std::numeric_limits<std::int32_t>::min();
    const FrameBytes min_bytes = encode(header);
    CHECK(min_bytes[8] == b(0x00));
    CHECK(min_bytes[11] == b(0x80));
  }
  SUBCASE("a control frame with default fields") {
    FrameHeader header;
    header.type = FrameType::abort;
    header.payload_bytes = 17;
    header.sequence = 9;
    const FrameBytes expected = {b(0x46), b(0x53), b(2), b(2), b(5),  b(1), b(0), b(0),
                                 b(0),    b(0),    b(0), b(0), b(17), b(0), b(0), b(0),
                                 b(9),    b(0),    b(0), b(0), b(0),  b(0), b(0), b(0),
                                 b(0),    b(0),    b(0), b(0), b(0),  b(0), b(0), b(0)};
    CHECK(encode(header) == expected);
  }
  SUBCASE("a default header") {
    // FrameHeader{} is a data frame of a barrier over uint8 with op sum: every field but the
    // magic, the version (2) and the type is zero except the element type (uint8 = 1) and the
    // collective (barrier = 5).
    const FrameBytes bytes = encode(FrameHeader{});
    for (std::size_t i = 0; i < kFrameHeaderBytes; ++i) {
      CAPTURE(i);
      unsigned expected = 0;
      if (i == 0) expected = 0x46;
      if (i == 1) expected = 0x53;
      if (i == 2) expected = 2;
      if (i == 3 || i == 5) expected = 1;
      if (i == 4) expected = 5;
      CHECK(static_cast<unsigned>(bytes[i]) == expected);
    }
  }
}

TEST_CASE("every frame type, collective, element type and op survives encode and decode") {
  int checked = 0;
  for (const FrameType type : kFrameTypes) {
    for (const Collective kind : kCollectives) {
      for (const DataType element : kDataTypes) {
        for (const ReduceOp op : kOps) {
          FrameHeader header{type, kind, element, op, 3, 100, 42, 1000};
          check_round_trip(header, 100);
          // The enum fields land in bytes 3 to 6 as their numeric values.
          const FrameBytes bytes = encode(header);
          CHECK(bytes[3] == static_cast<std::byte>(type));
          CHECK(bytes[4] == static_cast<std::byte>(kind));
          CHECK(bytes[5] == static_cast<std::byte>(element));
          CHECK(bytes[6] == static_cast<std::byte>(op));
          ++checked;
        }
      }
    }
  }
  CHECK(checked == 6 * 6 * 8 * 5);
}

TEST_CASE("extreme root, count, sequence and payload values survive encode and decode") {
  const std::vector<std::int32_t> roots = {0,
                                           1,
                                           -1,
                                           255,
                                           256,
                                           0x7F,
                                           0x80,
                                           std::numeric_limits<std::int32_t>::max(),
                                           std::numeric_limits<std::int32_t>::min(),
                                           std::numeric_limits<std::int32_t>::min() + 1};
  const std::vector<std::uint64_t> sixty_fours = {0,
                                                  1,
                                                  0xFF,
                                                  0x100,
                                                  0xFFFFFFFFULL,
                                                  0x100000000ULL,
                                                  0x8000000000000000ULL,
                                                  0x7FFFFFFFFFFFFFFFULL,
                                                  std::numeric_limits<std::uint64_t>::max()};
  for (const std::int32_t root : roots) {
    for (const std::uint64_t sequence : sixty_fours) {
      for (const std::uint64_t count : sixty_fours) {
        check_round_trip({FrameType::data, Collective::broadcast, DataType::float32, ReduceOp::sum,
                          root, 0, sequence, count},
                         0);
      }
    }
  }
  SUBCASE("data frames: payloads up to max_payload, including the largest uint32") {
    for (const std::uint32_t payload : {0u, 1u, 4096u, 4097u, 1u << 20, 0x7FFFFFFFu, kNoLimit}) {
      FrameHeader header{FrameType::data,
                         Collective::all_reduce,
                         DataType::float64,
                         ReduceOp::mean,
                         -1,
                         payload,
                         ~0ULL,
                         ~0ULL};
      check_round_trip(header, payload);  // exactly at the limit
      check_round_trip(header, kNoLimit);
    }
  }
  SUBCASE("control frames: payloads up to kMaxControlPayload, whatever max_payload is") {
    for (const FrameType type : {FrameType::abort, FrameType::timeout_notice, FrameType::alive,
                                 FrameType::goodbye, FrameType::release}) {
      for (const std::uint32_t payload : {0u, 1u, kMaxControlPayload - 1, kMaxControlPayload}) {
        FrameHeader header;
        header.type = type;
        header.payload_bytes = payload;
        header.sequence = std::numeric_limits<std::uint64_t>::max();
        check_round_trip(header, 0);
        check_round_trip(header, 1);
        check_round_trip(header, kNoLimit);
      }
    }
  }
}

TEST_CASE("every FrameError, with the output left untouched") {
  const FrameBytes valid = kLayoutBytes;  // a data frame with payload 0x11223344
  {
    FrameHeader out = kSentinel;
    REQUIRE(!decode_into(valid, out, kNoLimit));
  }

  SUBCASE("bad magic") {
    check_rejected(with_byte(valid, 0, 0x47), kNoLimit, FrameError::bad_magic);
    check_rejected(with_byte(valid, 1, 0x52), kNoLimit, FrameError::bad_magic);
    check_rejected(with_byte(valid, 0, 0x00), kNoLimit, FrameError::bad_magic);
    // The magic written big-endian ("SF" on the wire) is not the magic.
    check_rejected(with_byte(with_byte(valid, 0, 0x53), 1, 0x46), kNoLimit, FrameError::bad_magic);
    check_rejected(FrameBytes{}, kNoLimit, FrameError::bad_magic);
  }
  SUBCASE("bad version") {
    for (const unsigned version : {0u, 1u, 3u, 0x81u, 0xFFu})
      check_rejected(with_byte(valid, 2, version), kNoLimit, FrameError::bad_version);
  }
  SUBCASE("bad type: 0, 9 and above") {
    for (const unsigned type : {0u, 9u, 10u, 0x80u, 0xFFu})
      check_rejected(with_byte(valid, 3, type), kNoLimit, FrameError::bad_type);
  }
  SUBCASE("collective out of range") {
    for (const unsigned kind : {6u, 7u, 0xFFu})
      check_rejected(with_byte(valid, 4, kind), kNoLimit, FrameError::bad_collective);
  }
  SUBCASE("element type out of range") {
    for (const unsigned element : {8u, 9u, 0xFFu})
      check_rejected(with_byte(valid, 5, element), kNoLimit, FrameError::bad_element_type);
  }
  SUBCASE("reduce op out of range") {
    for (const unsigned op : {5u, 6u, 0xFFu})
      check_rejected(with_byte(valid, 6, op), kNoLimit, FrameError::bad_op);
  }
  SUBCASE("flags: lent on data frames, in_region on requests and replies, none on control") {
    for (const unsigned flags : {2u, 3u, 0x80u, 0xFFu})
      check_rejected(with_byte(valid, 7, flags), kNoLimit, FrameError::bad_flags);
    FrameHeader out = kSentinel;
    REQUIRE(!decode_into(with_byte(valid, 7, 1), out, kNoLimit));
    CHECK(out.flags == static_cast<std::uint8_t>(FrameFlag::lent));
    const FrameBytes release = with_payload(with_byte(valid, 3, 6), 0);
    REQUIRE(!decode_into(release, out, kNoLimit));
    CHECK(out.flags == 0);
    for (const unsigned flags : {1u, 2u, 0xFFu})
      check_rejected(with_byte(release, 7, flags), kNoLimit, FrameError::bad_flags);
    for (const unsigned type : {7u, 8u}) {
      const FrameBytes service = with_byte(valid, 3, type);
      REQUIRE(!decode_into(with_byte(service, 7, 2), out, kNoLimit));
      CHECK(out.flags == static_cast<std::uint8_t>(FrameFlag::in_region));
      for (const unsigned flags : {1u, 3u, 4u, 0xFFu})
        check_rejected(with_byte(service, 7, flags), kNoLimit, FrameError::bad_flags);
    }
  }
  SUBCASE("data frame payload above max_payload") {
    check_rejected(valid, 0x11223343, FrameError::payload_too_large);
    check_rejected(valid, 0, FrameError::payload_too_large);
    FrameHeader out = kSentinel;
    CHECK(!decode_into(valid, out, 0x11223344));  // exactly the limit is fine
    check_rejected(with_payload(valid, 1), 0, FrameError::payload_too_large);
    check_rejected(with_payload(valid, kNoLimit), kNoLimit - 1, FrameError::payload_too_large);
    check_rejected(with_payload(valid, 4097), 4096, FrameError::payload_too_large);
  }
  SUBCASE("control frame payload above kMaxControlPayload, however large max_payload is") {
    for (const FrameType type : {FrameType::abort, FrameType::timeout_notice, FrameType::alive,
                                 FrameType::goodbye, FrameType::release}) {
      CAPTURE(static_cast<int>(type));
      const FrameBytes control = with_byte(valid, 3, static_cast<unsigned>(type));
      for (const std::uint32_t limit : {0u, kMaxControlPayload, 1u << 20, kNoLimit}) {
        CAPTURE(limit);
        check_rejected(with_payload(control, kMaxControlPayload + 1), limit,
                       FrameError::payload_too_large);
        check_rejected(with_payload(control, kNoLimit), limit, FrameError::payload_too_large);
        check_rejected(control, limit, FrameError::payload_too_large);  // 0x11223344
        FrameHeader out = kSentinel;
        CHECK(!decode_into(with_payload(control, kMaxControlPayload), out, limit));
        CHECK(out.payload_bytes == kMaxControlPayload);
        CHECK(out.type == type);
      }
    }
  }
}

TEST_CASE("FrameError converts to std::error_code in the strata.frame category") {
  const std::error_category& category = strata::transport::tcp::frame_category();
  CHECK(std::string(category.name()) == "strata.frame");
  CHECK(&make_error_code(FrameError::bad_magic).category() == &category);

  std::set<std::string> messages;
  for (const FrameError error : kFrameErrors) {
    CAPTURE(static_cast<int>(error));
    const std::error_code ec = error;  // implicit, through is_error_code_enum
    CHECK(static_cast<bool>(ec));
    CHECK(ec.value() == static_cast<int>(error));
    CHECK(ec.category() == category);
    CHECK(ec == error);
    CHECK(ec.message() == std::string(to_string(error)));
    CHECK(!ec.message().empty());
    CHECK(ec.message() != "invalid frame");
    messages.insert(ec.message());
  }
  CHECK(messages.size() == kFrameErrors.size());
  CHECK(static_cast<int>(FrameError::bad_magic) == 1);  // 0 is success in std::error_code

  CHECK(make_error_code(FrameError::bad_magic).message() == "not a strata frame (bad magic)");
  CHECK(make_error_code(FrameError::payload_too_large).message() ==
        "payload length above the limit");
  CHECK(make_error_code(FrameError::bad_flags).message() ==
        "flags the frame's type does not allow");
  // A value outside the enum still has a message.
  CHECK(category.message(99) == "invalid frame");
  // Different categories do not compare equal even with the same value.
  CHECK(make_error_code(FrameError::bad_magic) != std::error_code(1, std::generic_category()));
}

}  // namespace
