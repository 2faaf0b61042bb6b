// Tests for strata/transport/tcp/link.hpp's lending (lending.hpp), on a real two-rank mesh over
// loopback:
//   - lent messages through socket buffers too small to take one whole: every message is
//     counted once, so the sender does not wait for releases that never come;
//   - against a peer written by hand from frame.hpp's layout: a release for more than was lent,
//     or for another collective, is a peer failure naming the peer; an honest one lets the
//     sender return, and not before it arrives;
//   - a sender that fails waits (a grace period at most) for the peer to read what it lent;
//   - a receiver that read lent pages reports its lender's abort rather than return them.
// The collectives' results with lending are checked in communicator/tcp_test.cpp.
#include <strata/transport/tcp/link.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <doctest/doctest.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/form_mesh.hpp>
#include <strata/transport/tcp/group.hpp>

#include "exceptions.hpp"

namespace {

using namespace std::chrono_literals;
using strata::Collective;
using strata::CollectiveCall;
using strata::Deadline;
using strata::testing::message_of;
namespace wire = strata::transport::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kLent = wire::kLendBytes;  // the smallest message that is lent

// Two ranks' meshes on loopback, formed by two threads.
std::array<std::unique_ptr<wire::Mesh>, 2> two_meshes(int socket_buffer_bytes = 0) {
  asio::io_context io;
  std::vector<strata::cluster::Address> addresses;
  std::array<int, 2> listen_fds{};
  for (int r = 0; r < 2; ++r) {
    asio::ip::tcp::acceptor acceptor(
        io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    addresses.push_back({"127.0.0.1", acceptor.local_endpoint().port()});
    listen_fds[static_cast<std::size_t>(r)] = acceptor.release();
  }
  auto config = [&](int rank) {
    wire::MeshConfig config;
    config.rank = rank;
    config.addresses = addresses;
    config.cluster = 0x11;
    config.tunables = 0x22;
    config.socket_buffer_bytes = socket_buffer_bytes;
    config.listen_fd = listen_fds[static_cast<std::size_t>(rank)];
    return config;
  };
  std::array<std::unique_ptr<wire::Mesh>, 2> meshes;
  std::exception_ptr error;
  std::thread other([&] {
    try {
      meshes[1] = wire::form_mesh(config(1), Deadline::after(10s));
    } catch (...) {
      error = std::current_exception();
    }
  });
  meshes[0] = wire::form_mesh(config(0), Deadline::after(10s));
  other.join();
  if (error) std::rethrow_exception(error);
  return meshes;
}

CollectiveCall broadcast_of(std::size_t bytes) {
  CollectiveCall call;
  call.kind = Collective::broadcast;
  call.count = bytes;  // uint8 elements
  return call;
}

// The hand-written peer's side of a connection: blocking reads and writes of whole frames.
// They run on the peer's thread, so they throw (caught there, checked on the test's thread)
// rather than use doctest's REQUIRE.
void make_blocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
}

void read_exactly(int fd, std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::recv(fd, data, bytes, 0);
    if (n <= 0) throw std::runtime_error("the hand-made peer's connection closed");
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("the hand-made peer could not send");
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// Reads one data frame and its payload; returns the header.
wire::FrameHeader read_message(int fd, std::vector<std::byte>& payload) {
  wire::FrameBytes bytes{};
  read_exactly(fd, bytes.data(), bytes.size());
  wire::FrameHeader header;
  if (wire::decode(bytes, header, std::uint32_t{1} << 30))
    throw std::runtime_error("the hand-made peer got an invalid header");
  payload.resize(header.payload_bytes);
  read_exactly(fd, payload.data(), payload.size());
  return header;
}

void send_frame(int fd, const wire::FrameHeader& header, std::span<const std::byte> payload = {}) {
  const wire::FrameBytes bytes = wire::encode(header);
  write_all(fd, bytes.data(), bytes.size());
  write_all(fd, payload.data(), payload.size());
}

void send_release(int fd, std::uint64_t sequence, std::uint64_t count) {
  wire::FrameHeader header;
  header.type = wire::FrameType::release;
  header.sequence = sequence;
  header.count = count;
  send_frame(fd, header);
}

void nothing_received(std::size_t) {}

constexpr auto kLentFlag = static_cast<std::uint8_t>(wire::FrameFlag::lent);

struct Lending {
  std::exception_ptr error;       // rank 0's
  Clock::time_point returned_at;  // when rank 0's transfer returned or threw
  std::uint8_t flags = 0;         // of the message the peer received
  std::exception_ptr peer_error;  // the hand-made peer's
};

// Rank 0 runs a real Link that lends one kLent-byte broadcast message to rank 1, a peer by
// hand that reads it and answers with `answer(control fd, the message's header)`.
template <class Answer>
Lending lend_to_handmade_peer(Answer answer) {
  auto meshes = two_meshes();
  const int control = meshes[1]->fd(0, 0);
  const int data = meshes[1]->fd(0, 1);
  make_blocking(control);
  make_blocking(data);
  Lending result;
  std::thread peer([&] {
    try {
      std::vector<std::byte> payload;
      const wire::FrameHeader header = read_message(data, payload);
      result.flags = header.flags;
      answer(control, header);
    } catch (...) {
      result.peer_error = std::current_exception();
    }
  });
  {
    wire::Group group(std::move(meshes[0]), 1U << 20, /*lend_from_bytes=*/0);
    const std::vector<std::byte> sent(kLent, std::byte{7});
    const CollectiveCall call = broadcast_of(kLent);
    wire::Link link(group, call, Deadline::after(10s));
    const std::array sends{strata::transport::SendStep{1, sent.data(), sent.size(), -1}};
    try {
      link.transfer(sends, std::span<const strata::transport::RecvStep>{}, nothing_received);
    } catch (...) {
      result.error = std::current_exception();
    }
    result.returned_at = Clock::now();
    peer.join();
  }
  REQUIRE_MESSAGE(!result.peer_error, message_of(result.peer_error));
  REQUIRE(result.flags == kLentFlag);  // this system lets the link lend
  return result;
}

}  // namespace

TEST_CASE("lent messages through socket buffers smaller than a message: each counted once") {
  // A socket this small is full after every lent message, so the next header often finds
  // it full (EAGAIN): counted again then, the sender would wait for more releases than the
  // receiver owes, until the deadline.
  auto meshes = two_meshes(/*socket_buffer_bytes=*/64 << 10);
  constexpr std::size_t kMessages = 48;
  std::vector<std::byte> sent(kMessages * kLent);
  for (std::size_t i = 0; i < sent.size(); ++i)
    sent[i] = static_cast<std::byte>(i * 7 + i / 4096);
  std::vector<std::byte> received(sent.size());
  const CollectiveCall call = broadcast_of(kLent);
  std::vector<strata::transport::SendStep> sends;
  std::vector<strata::transport::RecvStep> recvs;
  for (std::size_t k = 0; k < kMessages; ++k) {
    sends.push_back({1, sent.data() + k * kLent, kLent, -1});
    recvs.push_back({0, received.data() + k * kLent, kLent, -1});
  }
  std::exception_ptr receiver_error;
  wire::Group sender(std::move(meshes[0]), 1U << 20, /*lend_from_bytes=*/0);
  wire::Group receiver(std::move(meshes[1]), 1U << 20, /*lend_from_bytes=*/0);
  std::thread receiving([&] {
    try {
      wire::Link link(receiver, call, Deadline::after(5s));
      link.transfer(std::span<const strata::transport::SendStep>{}, recvs, nothing_received);
    } catch (...) {
      receiver_error = std::current_exception();
    }
  });
  std::exception_ptr sender_error;
  try {
    wire::Link link(sender, call, Deadline::after(5s));
    link.transfer(sends, std::span<const strata::transport::RecvStep>{}, nothing_received);
  } catch (...) {
    sender_error = std::current_exception();
  }
  receiving.join();
  CHECK_MESSAGE(!sender_error, message_of(sender_error));
  CHECK_MESSAGE(!receiver_error, message_of(receiver_error));
  CHECK(received == sent);
}

TEST_CASE("an honest release lets the sender return, and not before it arrives") {
  std::atomic<Clock::time_point> released_at{};
  const auto lending = lend_to_handmade_peer([&](int control, const wire::FrameHeader& header) {
    std::this_thread::sleep_for(100ms);
    released_at = Clock::now();
    send_release(control, header.sequence, kLent);
  });
  CHECK_MESSAGE(!lending.error, message_of(lending.error));
  CHECK(lending.returned_at >= released_at.load());
}

TEST_CASE("a release of more bytes than were lent is a peer failure naming the peer") {
  const auto error = lend_to_handmade_peer([](int control, const wire::FrameHeader& header) {
                       send_release(control, header.sequence, 2 * kLent);
                     }).error;
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(message_of(error).find("rank 1 said it had read 131072 bytes") != std::string::npos,
                message_of(error));
}

TEST_CASE("a release for another collective is a peer failure naming the peer") {
  const auto error = lend_to_handmade_peer([](int control, const wire::FrameHeader& header) {
                       send_release(control, header.sequence + 1, kLent);
                     }).error;
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(
      message_of(error).find("in collective #1, but in collective #0") != std::string::npos,
      message_of(error));
}

TEST_CASE("a sender that fails waits for its peer to read what it lent") {
  // Rank 0 lends a message to rank 1 and expects one back; rank 1 (by hand) reads the lent
  // message, answers with another collective's message, and releases only later. Rank 0 fails
  // at once (MismatchError), but must not give its buffer back before the release.
  auto meshes = two_meshes();
  const int control = meshes[1]->fd(0, 0);
  const int data = meshes[1]->fd(0, 1);
  make_blocking(control);
  make_blocking(data);
  std::atomic<Clock::time_point> released_at{};
  std::uint8_t flags = 0;
  std::exception_ptr peer_error;
  std::thread peer([&] {
    try {
      std::vector<std::byte> payload;
      const wire::FrameHeader lent = read_message(data, payload);
      flags = lent.flags;
      wire::FrameHeader other = lent;
      other.kind = Collective::all_gather;
      other.flags = 0;
      other.payload_bytes = 8;
      const std::array<std::byte, 8> eight{};
      send_frame(data, other, eight);
      std::this_thread::sleep_for(150ms);
      released_at = Clock::now();
      send_release(control, lent.sequence, kLent);
    } catch (...) {
      peer_error = std::current_exception();
    }
  });
  std::exception_ptr error;
  Clock::time_point returned_at;
  {
    wire::Group group(std::move(meshes[0]), 1U << 20, /*lend_from_bytes=*/0);
    const std::vector<std::byte> sent(kLent, std::byte{7});
    std::array<std::byte, 8> back{};
    const CollectiveCall call = broadcast_of(kLent);
    wire::Link link(group, call, Deadline::after(10s));
    const std::array sends{strata::transport::SendStep{1, sent.data(), sent.size(), -1}};
    const std::array recvs{strata::transport::RecvStep{1, back.data(), back.size(), -1}};
    try {
      link.transfer(sends, recvs, nothing_received);
    } catch (...) {
      error = std::current_exception();
    }
    returned_at = Clock::now();
    peer.join();
  }
  REQUIRE_MESSAGE(!peer_error, message_of(peer_error));
  REQUIRE(flags == kLentFlag);
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::MismatchError);
  CHECK(returned_at >= released_at.load());
}

// Rank 0, by hand, lends rank 1 one message of collective #0 and then does `then` with its
// control connection; rank 1 runs a real Link receiving it. Returns rank 1's error, if any,
// and whether its group failed.
template <class Then>
std::pair<std::exception_ptr, bool> receive_from_handmade_lender(Then then) {
  auto meshes = two_meshes();
  const int control = meshes[0]->fd(1, 0);
  const int data = meshes[0]->fd(1, 1);
  make_blocking(control);
  make_blocking(data);
  const CollectiveCall call = broadcast_of(kLent);
  wire::FrameHeader lent;
  lent.type = wire::FrameType::data;
  lent.kind = call.kind;
  lent.element_type = call.type;
  lent.count = call.count;
  lent.payload_bytes = static_cast<std::uint32_t>(kLent);
  lent.flags = kLentFlag;
  const std::vector<std::byte> payload(kLent, std::byte{3});
  send_frame(data, lent, payload);  // the receiving socket's buffer takes it whole
  then(control);

  wire::Group group(std::move(meshes[1]), 1U << 20, /*lend_from_bytes=*/0);
  std::vector<std::byte> received(kLent);
  wire::Link link(group, call, Deadline::after(10s));
  const std::array recvs{strata::transport::RecvStep{0, received.data(), received.size(), -1}};
  std::exception_ptr error;
  try {
    link.transfer(std::span<const strata::transport::SendStep>{}, recvs, nothing_received);
  } catch (...) {
    error = std::current_exception();
  }
  if (!error) CHECK(received == payload);
  return {error, group.failed()};
}

// An abort frame as a rank that had begun `calls` collectives sends it.
void send_abort(int control, std::uint64_t calls) {
  wire::FrameHeader abort;
  abort.type = wire::FrameType::abort;
  abort.sequence = calls;
  // Peer failure, the root cause at rank 0 (i32, little-endian), then the text.
  const std::string why = std::string("\x01\0\0\0\0", 5) + "rank 0 gave up";
  abort.payload_bytes = static_cast<std::uint32_t>(why.size());
  send_frame(control, abort, std::as_bytes(std::span(why)));
}

TEST_CASE("a receiver that read lent pages reports its lender's abort instead of returning") {
  // Rank 0 lends rank 1 a message and fails in that call (it had begun 1 collective): its
  // caller may then have overwritten the pages before rank 1 read them.
  const auto [error, failed] =
      receive_from_handmade_lender([](int control) { send_abort(control, 1); });
  REQUIRE(error);
  CHECK(failed);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(message_of(error).find("rank 1: broadcast: peer failure: rank 0 gave up;") !=
                    std::string::npos,
                message_of(error));
}

TEST_CASE("a lender's failure in a later call, or its close, is the next call's news") {
  SUBCASE("an abort sent in its next collective") {
    // The lender returned from collective #0 (all released) and failed in #1: rank 1's data
    // is right; its group fails, and its next call reports it.
    const auto [error, failed] =
        receive_from_handmade_lender([](int control) { send_abort(control, 2); });
    CHECK_MESSAGE(!error, message_of(error));
    CHECK(failed);
  }
  SUBCASE("a close without goodbye") {
    const auto [error, failed] =
        receive_from_handmade_lender([](int control) { ::shutdown(control, SHUT_WR); });
    CHECK_MESSAGE(!error, message_of(error));
    CHECK_FALSE(failed);
  }
}
