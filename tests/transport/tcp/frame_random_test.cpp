// Bounded, deterministic random-input test of the TCP frame header and Hello decoders through
// the fuzz target (tests/support/fuzz/frame.hpp), so that every build checks what the libFuzzer
// target checks: the seed corpus, random bytes, random headers behind a (mostly) valid magic, every
// single-byte change and every one- and two-bit flip of valid headers and Hellos (with the exact
// outcome each must have), random mutations of valid message streams and random valid headers.
// About 390,000 inputs, fixed seeds; well under a second in an optimized build.
#include <strata/transport/tcp/frame.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/tcp/handshake.hpp>

#include "fuzz/frame.hpp"

namespace {

using strata::Collective;
using strata::DataType;
using strata::ReduceOp;
using strata::transport::tcp::FrameBytes;
using strata::transport::tcp::FrameError;
using strata::transport::tcp::FrameHeader;
using strata::transport::tcp::FrameType;
using strata::transport::tcp::Hello;
using strata::transport::tcp::HelloBytes;
using strata::transport::tcp::kFrameHeaderBytes;
using strata::transport::tcp::kHelloBytes;
using strata::transport::tcp::kMaxControlPayload;

constexpr std::uint32_t kNoLimit = std::numeric_limits<std::uint32_t>::max();

// SplitMix64: the same sequence on every standard library (std distributions are not).
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (the modulo bias is irrelevant here).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  std::byte byte() { return static_cast<std::byte>(next() & 0xFF); }

 private:
  std::uint64_t state_;
};

void fuzz(std::span<const std::byte> bytes) {
  strata::testing::fuzz_frame(
      std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
}

// What decode says about `bytes`: 0 for success, else the FrameError value.
int outcome(const FrameBytes& bytes, std::uint32_t max_payload) {
  FrameHeader out;
  const std::error_code ec = strata::transport::tcp::decode(
      std::span<const std::byte, kFrameHeaderBytes>(bytes), out, max_payload);
  return ec.value();
}

bool hello_accepted(const HelloBytes& bytes) {
  Hello out;
  return strata::transport::tcp::decode(std::span<const std::byte, kHelloBytes>(bytes), out);
}

std::filesystem::path corpus_directory() {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "fuzz" /
         "corpus" / "frame";
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i)
    out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

// One valid header of each frame type. The data frame's payload (5000) is above
// kMaxControlPayload, so that turning it into a control frame must be refused.
std::vector<FrameHeader> valid_headers() {
  return {
      {FrameType::data, Collective::all_reduce, DataType::float32, ReduceOp::sum, 0, 5000, 7, 1250},
      {FrameType::abort, Collective::barrier, DataType::uint8, ReduceOp::sum, 0, 10, 3, 0},
      {FrameType::timeout_notice, Collective::barrier, DataType::uint8, ReduceOp::sum, 0, 0, 4, 0},
      {FrameType::alive, Collective::barrier, DataType::uint8, ReduceOp::sum, 0, 0, 4, 0},
      {FrameType::goodbye, Collective::reduce_scatter, DataType::float64, ReduceOp::mean, -1, 0,
       ~0ULL, ~0ULL},
  };
}

std::vector<Hello> valid_hellos() {
  Hello plain;
  plain.rank = 2;
  plain.world_size = 5;
  plain.cluster = 0xcbf29ce484222325ULL;
  Hello token = plain;
  token.connection = 3;
  token.flags = Hello::kHasToken;
  token.tunables = 0x0123456789abcdefULL;
  token.incarnation = 0xfedcba9876543210ULL;
  for (std::size_t i = 0; i < token.nonce.size(); ++i)
    token.nonce[i] = static_cast<std::byte>(0x40 + i);
  return {plain, token};
}

// The limit the exhaustive tests decode data frames under: above every valid payload.
constexpr std::uint32_t kLimit = 1 << 20;

// The outcome a header with byte `offset` of `valid` set to `value` must have under kLimit.
int expected_outcome(const FrameBytes& valid, std::size_t offset, unsigned value) {
  const auto original = static_cast<unsigned>(valid[offset]);
  if (offset <= 1) return value == original ? 0 : static_cast<int>(FrameError::bad_magic);
  if (offset == 2) return value == 2 ? 0 : static_cast<int>(FrameError::bad_version);
  const auto payload =
      static_cast<std::uint32_t>(valid[12]) | static_cast<std::uint32_t>(valid[13]) << 8 |
      static_cast<std::uint32_t>(valid[14]) << 16 | static_cast<std::uint32_t>(valid[15]) << 24;
  if (offset == 3) {
    if (value < 1 || value > 8) return static_cast<int>(FrameError::bad_type);
    const unsigned allowed = value == 1 ? 1u : value >= 7 ? 2u : 0u;
    if ((static_cast<unsigned>(valid[7]) & ~allowed) != 0)
      return static_cast<int>(FrameError::bad_flags);
    const std::uint32_t limit = value == 1 || value >= 7 ? kLimit : kMaxControlPayload;
    return payload <= limit ? 0 : static_cast<int>(FrameError::payload_too_large);
  }
  if (offset == 4) {
    const bool service = valid[3] == std::byte{7} || valid[3] == std::byte{8};
    return value <= 5 || service ? 0 : static_cast<int>(FrameError::bad_collective);
  }
  if (offset == 5) return value <= 7 ? 0 : static_cast<int>(FrameError::bad_element_type);
  if (offset == 6) return value <= 4 ? 0 : static_cast<int>(FrameError::bad_op);
  if (offset == 7) {
    // data frames: lent; requests and replies: in_region
    const unsigned allowed = valid[3] == std::byte{1} ? 1u : valid[3] >= std::byte{7} ? 2u : 0u;
    return (value & ~allowed) == 0 ? 0 : static_cast<int>(FrameError::bad_flags);
  }
  if (offset >= 12 && offset < 16) {
    const unsigned shift = 8 * static_cast<unsigned>(offset - 12);
    const std::uint32_t changed = (payload & ~(std::uint32_t{0xFF} << shift)) | value << shift;
    const std::uint32_t limit =
        valid[3] == std::byte{1} || valid[3] == std::byte{7} || valid[3] == std::byte{8}
            ? kLimit
            : kMaxControlPayload;
    return changed <= limit ? 0 : static_cast<int>(FrameError::payload_too_large);
  }
  return 0;  // root, sequence, count: any value
}

TEST_CASE("every file of the seed corpus passes through the fuzz target") {
  const std::filesystem::path directory = corpus_directory();
  REQUIRE(std::filesystem::is_directory(directory));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const std::vector<std::byte> bytes = read_file(entry.path());
    CAPTURE(name);
    fuzz(bytes);
    ++files;
    // The file names say what each seed is.
    if (name.starts_with("header")) {
      REQUIRE(bytes.size() % kFrameHeaderBytes == 0);
      for (std::size_t at = 0; at < bytes.size(); at += kFrameHeaderBytes) {
        FrameBytes header{};
        std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), kFrameHeaderBytes,
                    header.begin());
        CHECK(outcome(header, kNoLimit) == 0);
      }
    } else if (name.starts_with("hello")) {
      REQUIRE(bytes.size() == kHelloBytes);
      HelloBytes hello{};
      std::copy(bytes.begin(), bytes.end(), hello.begin());
      CHECK(hello_accepted(hello));
    } else if (name.starts_with("garbage")) {
      REQUIRE(bytes.size() >= kHelloBytes);
      FrameBytes header{};
      std::copy_n(bytes.begin(), kFrameHeaderBytes, header.begin());
      CHECK(outcome(header, kNoLimit) != 0);
      HelloBytes hello{};
      std::copy_n(bytes.begin(), kHelloBytes, hello.begin());
      CHECK_FALSE(hello_accepted(hello));
    }
  }
  CHECK(files >= 5);
}

TEST_CASE("random bytes") {
  Random random(0xf4a3e001);
  std::vector<std::byte> bytes;
  for (int i = 0; i < 40000; ++i) {
    bytes.resize(random.below(241));
    for (std::byte& x : bytes)
      x = random.byte();
    fuzz(bytes);
  }
}

TEST_CASE("random headers behind a (mostly) valid magic and version reach every outcome") {
  Random random(0xf4a3e002);
  std::set<int> outcomes;
  int accepted = 0;
  for (int i = 0; i < 40000; ++i) {
    FrameBytes bytes{};
    for (std::byte& x : bytes)
      x = random.byte();
    // Mostly the magic; sometimes its byte swap ("SF" on the wire) or one bit off.
    bytes[0] = std::byte{0x46};
    bytes[1] = std::byte{0x53};
    if (random.chance(4)) std::swap(bytes[0], bytes[1]);
    if (random.chance(4)) bytes[random.below(2)] ^= static_cast<std::byte>(1u << random.below(8));
    if (random.chance(95)) bytes[2] = std::byte{2};
    // Small values for the enum bytes, so that all of them are in range now and then.
    for (std::size_t at = 3; at <= 6; ++at)
      if (random.chance(90)) bytes[at] = static_cast<std::byte>(random.below(at == 3 ? 7 : 9));
    if (random.chance(90))  // no flags, or lent on a data frame
      bytes[7] = bytes[3] == std::byte{1} && random.chance(50) ? std::byte{1} : std::byte{0};
    if (random.chance(70)) {  // a payload length near the limits
      const std::uint32_t base = random.chance(50) ? kMaxControlPayload : kLimit;
      const std::uint32_t payload = base - 2 + static_cast<std::uint32_t>(random.below(5));
      for (std::size_t k = 0; k < 4; ++k)
        bytes[12 + k] = static_cast<std::byte>((payload >> (8 * k)) & 0xFF);
    }
    fuzz(bytes);
    const int result = outcome(bytes, kLimit);
    outcomes.insert(result);
    if (result == 0) ++accepted;
  }
  // Success and every FrameError occur.
  CHECK(outcomes == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(accepted > 1000);
}

TEST_CASE("every single-byte change of a valid header has the outcome its field dictates") {
  int checked = 0;
  std::set<int> outcomes;
  for (const FrameHeader& header : valid_headers()) {
    const FrameBytes valid = strata::transport::tcp::encode(header);
    REQUIRE(outcome(valid, kLimit) == 0);
    for (std::size_t offset = 0; offset < kFrameHeaderBytes; ++offset) {
      for (unsigned value = 0; value < 256; ++value) {
        FrameBytes bytes = valid;
        bytes[offset] = static_cast<std::byte>(value);
        fuzz(bytes);
        const int expected = expected_outcome(valid, offset, value);
        const int got = outcome(bytes, kLimit);
        if (got != expected) {
          CAPTURE(static_cast<int>(header.type));
          CAPTURE(offset);
          CAPTURE(value);
          CHECK(got == expected);
        }
        outcomes.insert(got);
        ++checked;
      }
    }
  }
  CHECK(checked == 5 * 32 * 256);
  CHECK(outcomes == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("every single-byte change of a valid Hello is accepted unless it breaks the format") {
  int checked = 0;
  int rejected = 0;
  for (const Hello& hello : valid_hellos()) {
    const HelloBytes valid = strata::transport::tcp::encode(hello);
    REQUIRE(hello_accepted(valid));
    for (std::size_t offset = 0; offset < kHelloBytes; ++offset) {
      for (unsigned value = 0; value < 256; ++value) {
        HelloBytes bytes = valid;
        bytes[offset] = static_cast<std::byte>(value);
        fuzz(bytes);
        bool expected = true;
        if (offset < 4) expected = bytes[offset] == valid[offset];  // magic
        if (offset == 16) expected = (value & ~1u) == 0;            // flags: bit 0 only
        if (offset > 16 && offset < 24) expected = value == 0;      // flags, reserved word
        const bool got = hello_accepted(bytes);
        if (got != expected) {
          CAPTURE(offset);
          CAPTURE(value);
          CHECK(got == expected);
        }
        if (!got) ++rejected;
        ++checked;
      }
    }
  }
  CHECK(checked == 2 * 80 * 256);
  // Rejected: 4 magic bytes x 255 values, 254 flag values, 7 flag or reserved bytes x 255.
  CHECK(rejected == 2 * (4 * 255 + 254 + 7 * 255));
}

TEST_CASE("every one- and two-bit flip of valid headers and Hellos") {
  int checked = 0;
  for (const FrameHeader& header : valid_headers()) {
    const FrameBytes valid = strata::transport::tcp::encode(header);
    constexpr std::size_t kBits = 8 * kFrameHeaderBytes;
    for (std::size_t first = 0; first < kBits; ++first) {
      for (std::size_t second = first; second < kBits; ++second) {
        FrameBytes bytes = valid;
        bytes[first / 8] ^= static_cast<std::byte>(1u << (first % 8));
        if (second != first) bytes[second / 8] ^= static_cast<std::byte>(1u << (second % 8));
        fuzz(bytes);
        ++checked;
      }
    }
  }
  for (const Hello& hello : valid_hellos()) {
    const HelloBytes valid = strata::transport::tcp::encode(hello);
    for (std::size_t bit = 0; bit < 8 * kHelloBytes; ++bit) {
      HelloBytes bytes = valid;
      bytes[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
      fuzz(bytes);
      // Every flip in the magic, flags or reserved word is refused except bit 0 of the flags.
      const std::size_t offset = bit / 8;
      const bool format = offset < 4 || (offset >= 16 && offset < 24);
      CHECK(hello_accepted(bytes) == (!format || bit == 16 * 8));
      ++checked;
    }
  }
  CHECK(checked == 5 * (256 * 257 / 2) + 2 * 640);
}

TEST_CASE("random mutations of valid message streams") {
  Random random(0xf4a3e003);
  const std::vector<FrameHeader> headers = valid_headers();
  const std::vector<Hello> hellos = valid_hellos();
  static constexpr std::array<unsigned, 12> kInteresting = {0, 1, 2,    4,    5,    6,
                                                            7, 8, 0x7F, 0x80, 0xFE, 0xFF};
  int accepted = 0;
  int rejected = 0;
  std::vector<std::byte> stream;
  for (int i = 0; i < 30000; ++i) {
    stream.clear();
    const bool of_hellos = random.chance(30);
    if (of_hellos) {  // Hellos (every 80 bytes)
      for (std::size_t k = 1 + random.below(2); k > 0; --k) {
        const HelloBytes bytes = strata::transport::tcp::encode(hellos[random.below(2)]);
        stream.insert(stream.end(), bytes.begin(), bytes.end());
      }
    } else {  // headers (every 32 bytes)
      for (std::size_t k = 1 + random.below(5); k > 0; --k) {
        const FrameBytes bytes =
            strata::transport::tcp::encode(headers[random.below(headers.size())]);
        stream.insert(stream.end(), bytes.begin(), bytes.end());
      }
    }
    for (std::size_t m = 1 + random.below(4); m > 0; --m) {
      const std::size_t at = random.below(stream.size());
      switch (random.below(4)) {
        case 0:  // bit flip
          stream[at] ^= static_cast<std::byte>(1u << random.below(8));
          break;
        case 1:  // an interesting value
          stream[at] = static_cast<std::byte>(kInteresting[random.below(kInteresting.size())]);
          break;
        case 2:  // a random byte
          stream[at] = random.byte();
          break;
        default:  // copy a byte from elsewhere
          stream[at] = stream[random.below(stream.size())];
          break;
      }
    }
    fuzz(stream);
    if (of_hellos) continue;
    FrameBytes first{};
    std::copy_n(stream.begin(), kFrameHeaderBytes, first.begin());
    if (outcome(first, kLimit) == 0) {
      ++accepted;
    } else {
      ++rejected;
    }
  }
  // Both sides of the decoder are exercised.
  CHECK(accepted > 3000);
  CHECK(rejected > 3000);
}

TEST_CASE("random valid headers round trip, under the tightest limit") {
  Random random(0xf4a3e004);
  for (int i = 0; i < 30000; ++i) {
    FrameHeader header;
    header.type = static_cast<FrameType>(1 + random.below(5));
    header.kind = static_cast<Collective>(random.below(6));
    header.element_type = static_cast<DataType>(random.below(8));
    header.op = static_cast<ReduceOp>(random.below(5));
    header.root = static_cast<std::int32_t>(static_cast<std::uint32_t>(random.next()));
    header.payload_bytes = header.type == FrameType::data
                               ? static_cast<std::uint32_t>(random.next())
                               : static_cast<std::uint32_t>(random.below(kMaxControlPayload + 1));
    header.sequence = random.next();
    header.count = random.chance(50) ? random.next() : random.below(1000);
    const FrameBytes bytes = strata::transport::tcp::encode(header);
    fuzz(bytes);
    const std::uint32_t tight = header.type == FrameType::data ? header.payload_bytes : 0;
    FrameHeader out;
    const std::error_code ec = strata::transport::tcp::decode(
        std::span<const std::byte, kFrameHeaderBytes>(bytes), out, tight);
    if (ec || out != header) {
      CAPTURE(i);
      CHECK_MESSAGE(!ec, ec.message());
      CHECK(out == header);
    }
  }
}

}  // namespace
