// The bytes of scheduled functions' arguments and results (coordinator/codec.hpp): round trips
// of every shippable kind, a fixed little-endian layout, and malformed bytes refused.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <strata/coordinator/codec.hpp>
#include <strata/coordinator/functions.hpp>
#include <strata/coordinator/protocol.hpp>
#include <strata/core/error.hpp>

namespace {

using strata::coordinator::from_bytes;
using strata::coordinator::to_bytes;

enum class Color : std::uint16_t { red = 1, blue = 513 };

template <class T>
void round_trip(const T& value) {
  CHECK(from_bytes<T>(to_bytes(value)) == value);
}

std::vector<std::byte> bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (const int v : values)
    out.push_back(static_cast<std::byte>(v));
  return out;
}

}  // namespace

TEST_CASE("every shippable kind round-trips") {
  round_trip(std::int8_t{-5});
  round_trip(std::uint64_t{0xFEDCBA9876543210ULL});
  round_trip(std::numeric_limits<std::int64_t>::min());
  round_trip(true);
  round_trip(-0.0);
  round_trip(std::numeric_limits<float>::infinity());
  round_trip(3.25f);
  round_trip(Color::blue);
  round_trip(std::string{});
  round_trip(std::string("strata\0coordinator", 18));
  round_trip(std::vector<double>{});
  round_trip(std::vector<double>{1.5, -2.25, 1e300});
  round_trip(std::vector<std::string>{"a", "", "ccc"});
  round_trip(std::vector<std::vector<int>>{{1, 2}, {}, {3}});
  round_trip(std::array<std::int16_t, 3>{-1, 0, 1});
  round_trip(std::pair<std::string, float>{"x", 2.0f});
  round_trip(std::tuple<int, std::string, std::vector<std::uint8_t>>{7, "seven", {7, 7}});
  round_trip(std::tuple<>{});
  const auto handle = from_bytes<strata::coordinator::PerWorker<int>>(
      to_bytes(strata::coordinator::PerWorker<int>{42}));
  CHECK(handle.id == 42);
  // NaN's bits survive.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double back = from_bytes<double>(to_bytes(nan));
  CHECK(std::memcmp(&nan, &back, sizeof nan) == 0);
}

TEST_CASE("numbers are little-endian and lengths 64-bit, whatever the host") {
  CHECK(to_bytes(std::uint32_t{0x01020304}) == bytes({4, 3, 2, 1}));
  CHECK(to_bytes(std::int16_t{-2}) == bytes({0xFE, 0xFF}));
  CHECK(to_bytes(Color::blue) == bytes({1, 2}));
  CHECK(to_bytes(std::string("hi")) == bytes({2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'}));
  CHECK(to_bytes(1.0f) == bytes({0, 0, 0x80, 0x3F}));
}

TEST_CASE("malformed bytes are a MismatchError, never a read past the end") {
  // Too few bytes, bytes left over, a bool that is neither 0 nor 1.
  CHECK_THROWS_AS(from_bytes<std::uint32_t>(bytes({1, 2, 3})), strata::MismatchError);
  CHECK_THROWS_AS(from_bytes<std::uint8_t>(bytes({1, 2})), strata::MismatchError);
  CHECK_THROWS_AS(from_bytes<bool>(bytes({2})), strata::MismatchError);
  // A length larger than what follows allocates nothing.
  CHECK_THROWS_AS(from_bytes<std::string>(bytes({0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F})),
                  strata::MismatchError);
  CHECK_THROWS_AS(
      from_bytes<std::vector<std::vector<int>>>(bytes({0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 1})),
      strata::MismatchError);
  // A request's prefix and an error's bytes from random garbage: refused or decoded, never more.
  std::mt19937 random(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::byte> garbage(static_cast<std::size_t>(random() % 64));
    for (auto& b : garbage)
      b = static_cast<std::byte>(random());
    try {
      strata::coordinator::Reader reader(garbage);
      (void)strata::coordinator::decode_prefix(reader);
    } catch (const strata::MismatchError&) {
    }
    try {
      (void)strata::coordinator::decode_error(garbage);
    } catch (const strata::MismatchError&) {
    }
    try {
      (void)from_bytes<std::tuple<std::string, std::vector<double>, bool>>(garbage);
    } catch (const strata::MismatchError&) {
    }
  }
}

TEST_CASE("a remote error keeps its class and root cause") {
  const auto raise = [](auto error) {
    try {
      throw error;
    } catch (...) {
      return strata::coordinator::current_remote_error();
    }
  };
  const auto remote = raise(strata::PeerFailureError(3, "ps::push_pull", "ps task 1 closed"));
  const auto decoded = strata::coordinator::decode_error(strata::coordinator::encode(remote));
  CHECK(decoded.kind == strata::coordinator::RemoteError::Kind::peer_failure);
  CHECK(decoded.rank == 3);
  CHECK(decoded.what == "rank 3 in ps::push_pull: ps task 1 closed");
  const auto error = strata::coordinator::to_exception(decoded, 0, "step", "worker 2");
  try {
    std::rethrow_exception(error);
  } catch (const strata::PeerFailureError& e) {
    CHECK(e.root_cause().rank == 3);
    CHECK(std::string(e.what()).find("function 'step': peer failure: rank 3 in ps::push_pull") !=
          std::string::npos);
  }
  const auto plain = raise(std::out_of_range("index 9"));
  CHECK_THROWS_AS(
      std::rethrow_exception(strata::coordinator::to_exception(plain, 0, "f", "worker 1")),
      strata::FunctionError);
  CHECK_THROWS_AS(strata::coordinator::decode_error(bytes({9, 0, 0, 0, 0})), strata::MismatchError);
}
