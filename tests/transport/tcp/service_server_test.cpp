// Tests of the TCP service layer (transport/tcp/service_server.hpp, service_client.hpp) under a
// small echo service: requests of every size around the read-ahead, pipelined, trickling in a
// byte at a time, with payload the service leaves unread, replies larger than a socket's
// buffer, a payload that stalls, and garbage after a good request.
#include <strata/transport/tcp/service_client.hpp>
#include <strata/transport/tcp/service_server.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include <doctest/doctest.h>

namespace {

using namespace std::chrono_literals;
namespace tcp = strata::transport::tcp;
using strata::Clock;
using tcp::FrameHeader;
using tcp::FrameType;
using tcp::kReadAhead;
using tcp::ServiceIo;

// What a request asks the echo service for (the frame's root).
enum Ask : std::int32_t {
  echo = 0,          // read the payload in three steps (1 byte, then two parts), send it back
  leave_unread = 1,  // answer at once with the payload's size, reading none of it
  send_bytes = 2,    // answer with `count` bytes of pattern(i), reading none of the payload
};

std::byte pattern(std::size_t i) {
  return static_cast<std::byte>((i * 131 + 7) % 251);
}

class EchoSession final : public tcp::ServiceSession {
 public:
  tcp::SessionStep on_request(const FrameHeader& request) override {
    request_ = request;
    payload_.assign(request.payload_bytes, std::byte{0});
    step_ = 0;
    if (request.root == leave_unread)
      return tcp::SendReply{0, request.payload_bytes, strata::DataType::uint8, 0, {}, false};
    if (request.root == send_bytes) {
      payload_.resize(request.count);
      for (std::size_t i = 0; i < payload_.size(); ++i)
        payload_[i] = pattern(i);
      return tcp::SendReply{0, request.count, strata::DataType::uint8, 0, payload_, false};
    }
    return on_payload();
  }

  tcp::SessionStep on_payload() override {
    const std::span<std::byte> all(payload_);
    switch (step_++) {
      case 0:
        if (!all.empty()) return tcp::ReadPayload{{all.first(1)}};
        [[fallthrough]];
      case 1:
        if (all.size() > 1) {
          const auto rest = all.subspan(1);
          return tcp::ReadPayload{{rest.first(rest.size() / 2), rest.subspan(rest.size() / 2)}};
        }
        [[fallthrough]];
      default:
        return tcp::SendReply{0, request_.count + 1, strata::DataType::uint8, 0, payload_, false};
    }
  }

 private:
  FrameHeader request_;
  std::vector<std::byte> payload_;
  int step_ = 0;
};

class EchoService final : public tcp::ServiceHandler {
 public:
  std::unique_ptr<tcp::ServiceSession> open(int, tcp::ServiceReplier) override {
    return std::make_unique<EchoSession>();
  }
};

constexpr std::uint64_t kCluster = 0x5eed;
constexpr std::uint64_t kTunables = 0x7;

// The echo service on a thread of the test, until the test ends.
struct Served {
  explicit Served(std::chrono::milliseconds request_timeout = 10s)
      : server({"127.0.0.1", 0}, "echo service", {kCluster, kTunables, 1, 0, {}}, service,
               64u << 20, request_timeout),
        thread([this] { server.serve(60s); }) {}
  ~Served() { stop(); }
  void stop() {
    if (!thread.joinable()) return;
    server.stop();
    thread.join();
  }
  EchoService service;
  tcp::ServiceServer server;
  std::thread thread;
};

std::unique_ptr<tcp::ServiceConnection> connect(const Served& served) {
  std::string why;
  auto connection = tcp::ServiceConnection::connect(
      {"127.0.0.1", served.server.port()}, {kCluster, kTunables, 1, 0, {}}, 0, 0, 1,
      Clock::now() + 10s, "test", "the echo service", why);
  REQUIRE_MESSAGE(connection, why);
  return connection;
}

FrameHeader request(std::int32_t ask, std::uint64_t sequence, std::uint64_t count,
                    std::size_t payload_bytes) {
  FrameHeader header;
  header.type = FrameType::request;
  header.kind = static_cast<strata::Collective>(1);
  header.root = ask;
  header.sequence = sequence;
  header.count = count;
  header.payload_bytes = static_cast<std::uint32_t>(payload_bytes);
  return header;
}

std::vector<std::byte> payload_of(std::size_t bytes, std::size_t seed) {
  std::vector<std::byte> payload(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    payload[i] = pattern(i + seed);
  return payload;
}

void send(tcp::ServiceConnection& connection, const FrameHeader& header,
          std::span<const std::byte> payload) {
  const std::span<const std::byte> parts[] = {payload};
  REQUIRE(connection.send(header, parts, Clock::now() + 10s) == ServiceIo::done);
}

// Receives a reply and checks that it answers `sequence` with `count` and `payload`.
void expect_reply(tcp::ServiceConnection& connection, std::uint64_t sequence, std::uint64_t count,
                  std::span<const std::byte> payload) {
  tcp::FrameBytes bytes{};
  REQUIRE(connection.receive(bytes, Clock::now() + 10s) == ServiceIo::done);
  FrameHeader header;
  REQUIRE_FALSE(tcp::decode(bytes, header, 64u << 20));
  CHECK(header.type == FrameType::reply);
  CHECK(header.sequence == sequence);
  CHECK(header.count == count);
  REQUIRE(header.payload_bytes == payload.size());
  std::vector<std::byte> got(payload.size());
  REQUIRE(connection.receive(got, Clock::now() + 10s) == ServiceIo::done);
  CHECK(std::equal(got.begin(), got.end(), payload.begin(), payload.end()));
}

// One echo request of `payload` and its reply.
void echo_round_trip(tcp::ServiceConnection& connection, std::uint64_t sequence,
                     std::uint64_t count, std::span<const std::byte> payload) {
  send(connection, request(echo, sequence, count, payload.size()), payload);
  expect_reply(connection, sequence, count + 1, payload);
}

// Writes `bytes` on the connection's socket as they are, bypassing the framing.
void send_raw(tcp::ServiceConnection& connection, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(connection.native_handle(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    REQUIRE(n > 0);
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

std::vector<std::byte> framed(const FrameHeader& header, std::span<const std::byte> payload) {
  const tcp::FrameBytes head = tcp::encode(header);
  std::vector<std::byte> bytes(head.size() + payload.size());
  std::copy(head.begin(), head.end(), bytes.begin());
  std::copy(payload.begin(), payload.end(),
            bytes.begin() + static_cast<std::ptrdiff_t>(head.size()));
  return bytes;
}

// Sizes around every boundary of the read-ahead (the header's 32 bytes come first), and primes.
const std::vector<std::size_t> kSizes = {0,
                                         1,
                                         2,
                                         7,
                                         31,
                                         32,
                                         33,
                                         997,
                                         kReadAhead - 33,
                                         kReadAhead - 32,
                                         kReadAhead - 31,
                                         kReadAhead - 1,
                                         kReadAhead,
                                         kReadAhead + 1,
                                         2 * kReadAhead + 3,
                                         65537,
                                         (1u << 20) + 7};

}  // namespace

TEST_CASE("requests sent before the replies are read are answered in order") {
  Served served;
  auto connection = connect(served);
  // Small enough in all that neither side's socket buffers fill while nobody reads.
  std::vector<std::vector<std::byte>> payloads;
  std::uint64_t sequence = 0;
  for (int round = 0; round < 3; ++round)
    for (const std::size_t size : kSizes) {
      if (size > kReadAhead + 1) continue;
      payloads.push_back(payload_of(size, sequence));
      send(*connection, request(echo, ++sequence, size, size), payloads.back());
    }
  // Also in one write, so that one recv(2) on the server holds several requests.
  std::vector<std::byte> batch;
  for (std::size_t size = 0; size < 40; ++size) {
    payloads.push_back(payload_of(size, sequence));
    const auto bytes = framed(request(echo, ++sequence, size, size), payloads.back());
    batch.insert(batch.end(), bytes.begin(), bytes.end());
  }
  send_raw(*connection, batch);
  for (std::uint64_t i = 0; i < payloads.size(); ++i)
    expect_reply(*connection, i + 1, payloads[i].size() + 1, payloads[i]);
}

TEST_CASE("a request that trickles in a byte at a time is served whole") {
  Served served;
  auto connection = connect(served);
  for (const std::size_t size : {std::size_t{0}, std::size_t{5}, std::size_t{100}}) {
    CAPTURE(size);
    const auto payload = payload_of(size, size);
    const auto bytes = framed(request(echo, size + 1, 9, size), payload);
    for (const std::byte byte : bytes) {
      send_raw(*connection, std::span(&byte, 1));
      std::this_thread::sleep_for(200us);
    }
    expect_reply(*connection, size + 1, 10, payload);
  }
}

TEST_CASE("at every size a request gets its payload back, or has it dropped unread, in step") {
  Served served;
  auto connection = connect(served);
  std::uint64_t sequence = 0;
  for (const std::size_t size : kSizes) {
    CAPTURE(size);
    ++sequence;
    echo_round_trip(*connection, sequence, size, payload_of(size, sequence));
    const auto unread = payload_of(size, 1);
    send(*connection, request(leave_unread, ++sequence, 0, size), unread);
    expect_reply(*connection, sequence, size, {});
    ++sequence;
    echo_round_trip(*connection, sequence, 3, payload_of(17, sequence));
  }
}

TEST_CASE("a reply larger than the socket's buffers arrives whole") {
  Served served;
  auto connection = connect(served);
  const std::size_t size = 24u << 20;
  send(*connection, request(send_bytes, 1, size, 0), {});
  std::this_thread::sleep_for(50ms);  // the server's first write fills the buffers and waits
  std::vector<std::byte> expected(size);
  for (std::size_t i = 0; i < size; ++i)
    expected[i] = pattern(i);
  expect_reply(*connection, 1, size, expected);
  // And the next request is served.
  echo_round_trip(*connection, 2, 0, payload_of(3, 3));
}

TEST_CASE("a payload that stalls closes its connection at the request timeout; others go on") {
  Served served(300ms);
  auto stalled = connect(served);
  auto healthy = connect(served);
  const auto start = Clock::now();
  // The header and part of the payload arrive together; the rest never does.
  const auto payload = payload_of(100, 0);
  const auto bytes = framed(request(echo, 1, 0, payload.size()), payload);
  send_raw(*stalled, std::span(bytes).first(tcp::kFrameHeaderBytes + 10));
  for (std::uint64_t sequence = 1; Clock::now() - start < 200ms; ++sequence)
    echo_round_trip(*healthy, sequence, 0, payload);
  std::byte byte{};
  CHECK(stalled->receive(std::span(&byte, 1), Clock::now() + 10s) == ServiceIo::closed);
  const auto waited = Clock::now() - start;
  CHECK(waited >= 300ms);
  CHECK(waited < 5s);
  echo_round_trip(*healthy, 99, 0, payload);
  served.stop();
  CHECK(served.server.stats().refused == 1);
}

TEST_CASE("garbage after a good request: the request is answered, then the connection closed") {
  Served served;
  auto connection = connect(served);
  const auto payload = payload_of(10, 0);
  auto bytes = framed(request(echo, 1, 0, payload.size()), payload);
  for (int i = 0; i < 40; ++i)
    bytes.push_back(std::byte{0xAB});
  send_raw(*connection, bytes);
  expect_reply(*connection, 1, 1, payload);
  std::byte byte{};
  CHECK(connection->receive(std::span(&byte, 1), Clock::now() + 10s) == ServiceIo::closed);
  // The service serves a new connection as before.
  auto next = connect(served);
  echo_round_trip(*next, 1, 0, payload);
  served.stop();
  CHECK(served.server.stats().refused == 1);
}
