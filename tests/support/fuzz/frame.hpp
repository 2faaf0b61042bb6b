// tests/support/fuzz/frame.hpp — the fuzz target of the TCP wire decoders.
//
// One function shared by the libFuzzer entry point (tests/fuzz/frame_fuzz.cpp) and the bounded
// random-input test every build runs (tests/transport/tcp/frame_random_test.cpp). The input is
// cut into 32-byte frame headers (at offsets 0, 32, 64, ...) and, independently, into 80-byte
// Hellos (at offsets 0, 80, ...); a short tail is ignored. Each piece is decoded and checked
// against an independent reading of the layouts documented in frame.hpp and handshake.hpp. It
// calls std::abort() — a crash to libFuzzer, a failed test to ctest — when:
//   - decode(header) accepts bytes with a defect (bad magic, version, type, collective, element
//     type, op, flags byte, or a payload above the limit: max_payload for data frames,
//     kMaxControlPayload for the others), or rejects bytes without one, or names a reason the
//     bytes do not have, or writes its output on failure;
//   - an accepted header decodes to other field values than the layout says, or does not
//     encode back to the same 32 bytes;
//   - decode(Hello) accepts bytes with a wrong magic, a nonzero reserved word or unknown flag
//     bits, or rejects others, or writes its output on failure, or an accepted Hello differs
//     from the layout or does not encode back to the same 80 bytes.
// Every header is decoded under several data-frame limits, among them its own payload length
// and one less, so that the boundary is always exercised.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <string_view>
#include <system_error>

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>

namespace strata::testing {

namespace fuzz_detail {

[[noreturn]] inline void frame_failure(std::string_view what, std::span<const std::byte> bytes,
                                       std::uint32_t max_payload = 0) {
  std::fprintf(stderr,
               "fuzz_frame: %.*s\nmax_payload %u, bytes (%zu):", static_cast<int>(what.size()),
               what.data(), static_cast<unsigned>(max_payload), bytes.size());
  for (const std::byte x : bytes)
    std::fprintf(stderr, " %02x", static_cast<unsigned>(x));
  std::fprintf(stderr, "\n");
  std::abort();
}

// An unsigned little-endian field, read independently of frame.hpp's helpers.
inline std::uint64_t wire_field(std::span<const std::byte> bytes, std::size_t offset,
                                std::size_t size) {
  std::uint64_t value = 0;
  for (std::size_t i = size; i-- > 0;)
    value = (value << 8) | static_cast<std::uint64_t>(bytes[offset + i]);
  return value;
}

// What `out` holds before each decode; after a failure it must hold it still.
inline constexpr transport::tcp::FrameHeader kFrameSentinel{transport::tcp::FrameType::goodbye,
                                                            communicator::Collective::reduce,
                                                            DataType::float16,
                                                            ReduceOp::min,
                                                            -12345,
                                                            0xDEADu,
                                                            0x5E5E5E5E5E5E5E5EULL,
                                                            0xC0C0C0C0C0C0C0C0ULL,
                                                            0xA5};

inline void check_frame_header(std::span<const std::byte, transport::tcp::kFrameHeaderBytes> in,
                               std::uint32_t max_payload) {
  using transport::tcp::FrameError;
  using transport::tcp::FrameHeader;
  using transport::tcp::FrameType;
  auto require = [&](bool condition, std::string_view what) {
    if (!condition) frame_failure(what, in, max_payload);
  };

  // The defects of these bytes, by FrameError value (the table at the top of frame.hpp).
  const auto type = static_cast<unsigned>(in[3]);
  const auto payload = static_cast<std::uint32_t>(wire_field(in, 12, 4));
  const bool type_ok = type >= 1 && type <= 8;
  const bool service = type == 7 || type == 8;  // request, reply: the kind is the service's
  const std::uint32_t limit =
      type == 1 || service ? max_payload : transport::tcp::kMaxControlPayload;
  std::array<bool, 9> defect{};
  auto flag = [&](FrameError error) -> bool& { return defect[static_cast<std::size_t>(error)]; };
  flag(FrameError::bad_magic) = in[0] != std::byte{0x46} || in[1] != std::byte{0x53};
  flag(FrameError::bad_version) = in[2] != std::byte{2};
  flag(FrameError::bad_type) = !type_ok;
  flag(FrameError::bad_collective) = !service && static_cast<unsigned>(in[4]) > 5;
  flag(FrameError::bad_element_type) = static_cast<unsigned>(in[5]) > 7;
  flag(FrameError::bad_op) = static_cast<unsigned>(in[6]) > 4;
  // Data frames may set bit 0 (lent), requests and replies bit 1 (in_region); control frames
  // no bit.
  const auto flags = static_cast<unsigned>(in[7]);
  const unsigned allowed = type == 1 ? 1u : service ? 2u : 0u;
  flag(FrameError::bad_flags) = (flags & ~allowed) != 0;
  flag(FrameError::payload_too_large) = type_ok && payload > limit;
  bool valid = true;
  for (const bool d : defect)
    valid = valid && !d;

  FrameHeader out = kFrameSentinel;
  const std::error_code ec = transport::tcp::decode(in, out, max_payload);
  if (valid) {
    require(!ec, "a valid header was rejected");
    require(out.type == static_cast<FrameType>(type) &&
                out.kind == static_cast<communicator::Collective>(in[4]) &&
                out.element_type == static_cast<DataType>(in[5]) &&
                out.op == static_cast<ReduceOp>(in[6]) && out.flags == flags,
            "the enum fields decode to other values than the layout says");
    require(out.root == static_cast<std::int32_t>(static_cast<std::uint32_t>(wire_field(in, 8, 4))),
            "the root decodes to another value than the layout says");
    require(out.payload_bytes == payload && out.sequence == wire_field(in, 16, 8) &&
                out.count == wire_field(in, 24, 8),
            "payload, sequence or count decode to other values than the layout says");
    require(out.payload_bytes <= limit, "an accepted payload length is above the limit");
    const transport::tcp::FrameBytes again = transport::tcp::encode(out);
    for (std::size_t i = 0; i < transport::tcp::kFrameHeaderBytes; ++i)
      require(again[i] == in[i], "an accepted header does not encode back to the same bytes");
  } else {
    require(static_cast<bool>(ec), "an invalid header was accepted");
    require(ec.category() == transport::tcp::frame_category(),
            "the error is not in the strata.frame category");
    require(ec.value() >= 1 && ec.value() <= 8 && defect[static_cast<std::size_t>(ec.value())],
            "the error names a defect the header does not have");
    require(!ec.message().empty() && ec.message() != "invalid frame",
            "the error has no specific message");
    require(out == kFrameSentinel, "decode wrote its output on failure");
  }
}

inline transport::tcp::Hello hello_sentinel() {
  transport::tcp::Hello hello;
  hello.version = 0x7777;
  hello.connection = 0x6666;
  hello.rank = -5;
  hello.world_size = -6;
  hello.flags = 0x80000000u;  // never accepted
  hello.cluster = 0x5555555555555555ULL;
  hello.tunables = 0x4444444444444444ULL;
  hello.incarnation = 0x3333333333333333ULL;
  hello.nonce.fill(std::byte{0xEE});
  return hello;
}

inline void check_hello(std::span<const std::byte, transport::tcp::kHelloBytes> in) {
  using transport::tcp::Hello;
  auto require = [&](bool condition, std::string_view what) {
    if (!condition) frame_failure(what, in);
  };
  const bool valid = wire_field(in, 0, 4) == transport::tcp::kHelloMagic &&
                     wire_field(in, 20, 4) == 0 && (wire_field(in, 16, 4) & ~std::uint64_t{1}) == 0;

  const Hello sentinel = hello_sentinel();
  Hello out = sentinel;
  const bool accepted = transport::tcp::decode(in, out);
  if (!valid) {
    require(!accepted, "an invalid Hello was accepted");
    require(out == sentinel, "Hello decode wrote its output on failure");
    return;
  }
  require(accepted, "a valid Hello was rejected");
  bool nonce_ok = true;
  for (std::size_t i = 0; i < transport::tcp::kNonceBytes; ++i)
    nonce_ok = nonce_ok && out.nonce[i] == in[48 + i];
  require(
      out.version == wire_field(in, 4, 2) && out.connection == wire_field(in, 6, 2) &&
          out.rank == static_cast<std::int32_t>(static_cast<std::uint32_t>(wire_field(in, 8, 4))) &&
          out.world_size ==
              static_cast<std::int32_t>(static_cast<std::uint32_t>(wire_field(in, 12, 4))) &&
          out.flags == wire_field(in, 16, 4) && out.cluster == wire_field(in, 24, 8) &&
          out.tunables == wire_field(in, 32, 8) && out.incarnation == wire_field(in, 40, 8) &&
          nonce_ok,
      "a Hello decodes to other field values than the layout says");
  const transport::tcp::HelloBytes again = transport::tcp::encode(out);
  for (std::size_t i = 0; i < transport::tcp::kHelloBytes; ++i)
    require(again[i] == in[i], "an accepted Hello does not encode back to the same bytes");
}

}  // namespace fuzz_detail

/// Decodes `bytes` as frame headers and as Hellos and checks the results; aborts on any failure
/// (see the top of this file). Deterministic; never throws.
inline void fuzz_frame(std::span<const std::uint8_t> bytes) {
  using transport::tcp::kFrameHeaderBytes;
  using transport::tcp::kHelloBytes;
  const std::span<const std::byte> input = std::as_bytes(bytes);
  for (std::size_t at = 0; at + kFrameHeaderBytes <= input.size(); at += kFrameHeaderBytes) {
    const auto header = input.subspan(at).first<kFrameHeaderBytes>();
    const auto payload = static_cast<std::uint32_t>(fuzz_detail::wire_field(header, 12, 4));
    constexpr std::uint32_t kMax = std::numeric_limits<std::uint32_t>::max();
    for (const std::uint32_t max_payload :
         {std::uint32_t{0}, payload, payload - 1, transport::tcp::kMaxControlPayload,
          std::uint32_t{1} << 20, kMax})
      fuzz_detail::check_frame_header(header, max_payload);
  }
  for (std::size_t at = 0; at + kHelloBytes <= input.size(); at += kHelloBytes)
    fuzz_detail::check_hello(input.subspan(at).first<kHelloBytes>());
}

}  // namespace strata::testing
