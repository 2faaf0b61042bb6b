// Tests for strata/transport/tcp/link.hpp's lending, on a real two-rank mesh over loopback:
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
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <doctest/doctest.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace {

using namespace std::chrono_literals;
using strata::Deadline;
using strata::communicator::Collective;
using strata::communicator::CollectiveCall;
namespace wire = strata::transport::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kLent = wire::Link::kLendBytes;  // the smallest message that is lent

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
void make_blocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
}

void read_exactly(int fd, std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::recv(fd, data, bytes, 0);
    REQUIRE(n > 0);
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void write_all(int fd, const std::byte* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    REQUIRE(n > 0);
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

// Reads one data frame and its payload; returns the header.
wire::FrameHeader read_message(int fd, std::vector<std::byte>& payload) {
  wire::FrameBytes bytes{};
  read_exactly(fd, bytes.data(), bytes.size());
  wire::FrameHeader header;
  REQUIRE_FALSE(wire::decode(bytes, header, std::uint32_t{1} << 30));
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

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

void nothing_received(std::size_t) {}

// Rank 0 runs a real Link that lends one kLent-byte broadcast message to rank 1, a peer by
// hand that reads it and answers with `answer(control fd, the message's header)`. Returns
// rank 0's error, if any.
template <class Answer>
std::exception_ptr lend_to_handmade_peer(Answer answer) {
  auto meshes = two_meshes();
  const int control = meshes[1]->fd(0, 0);
  const int data = meshes[1]->fd(0, 1);
  make_blocking(control);
  make_blocking(data);
  std::thread peer([&] {
    std::vector<std::byte> payload;
    const wire::FrameHeader header = read_message(data, payload);
    CHECK(header.flags == static_cast<std::uint8_t>(wire::FrameFlag::lent));
    answer(control, header);
  });
  std::exception_ptr error;
  {
    wire::Group group(std::move(meshes[0]), 1U << 20, /*lend_from_bytes=*/0);
    const std::vector<std::byte> sent(kLent, std::byte{7});
    const CollectiveCall call = broadcast_of(kLent);
    wire::Link link(group, call, Deadline::after(10s));
    const std::array sends{strata::transport::SendStep{1, sent.data(), sent.size(), -1}};
    try {
      link.transfer(sends, std::span<const strata::transport::RecvStep>{}, nothing_received);
    } catch (...) {
      error = std::current_exception();
    }
    peer.join();
  }
  return error;
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
  const auto error = lend_to_handmade_peer([&](int control, const wire::FrameHeader& header) {
    std::this_thread::sleep_for(100ms);
    released_at = Clock::now();
    send_release(control, header.sequence, kLent);
  });
  const auto returned_at = Clock::now();
  CHECK_MESSAGE(!error, message_of(error));
  CHECK(returned_at >= released_at.load());
}

TEST_CASE("a release of more bytes than were lent is a peer failure naming the peer") {
  const auto error = lend_to_handmade_peer([](int control, const wire::FrameHeader& header) {
    send_release(control, header.sequence, 2 * kLent);
  });
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(message_of(error).find("rank 1 said it had read 131072 bytes") != std::string::npos,
                message_of(error));
}

TEST_CASE("a release for another collective is a peer failure naming the peer") {
  const auto error = lend_to_handmade_peer([](int control, const wire::FrameHeader& header) {
    send_release(control, header.sequence + 1, kLent);
  });
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
  std::thread peer([&] {
    std::vector<std::byte> payload;
    const wire::FrameHeader lent = read_message(data, payload);
    wire::FrameHeader other = lent;
    other.kind = Collective::all_gather;
    other.flags = 0;
    other.payload_bytes = 8;
    const std::array<std::byte, 8> eight{};
    send_frame(data, other, eight);
    std::this_thread::sleep_for(150ms);
    released_at = Clock::now();
    send_release(control, lent.sequence, kLent);
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
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::MismatchError);
  CHECK(returned_at >= released_at.load());
}

TEST_CASE("a receiver that read lent pages reports its lender's abort instead of returning") {
  // Rank 0 (by hand) lends rank 1 a message and fails right after: rank 0's caller may then
  // have overwritten the pages before rank 1 read them.
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
  lent.flags = static_cast<std::uint8_t>(wire::FrameFlag::lent);
  const std::vector<std::byte> payload(kLent, std::byte{3});
  std::thread lender([&] { send_frame(data, lent, payload); });
  lender.join();
  wire::FrameHeader abort;
  abort.type = wire::FrameType::abort;
  const std::string why = "\x01rank 0 gave up";
  abort.payload_bytes = static_cast<std::uint32_t>(why.size());
  send_frame(control, abort, std::as_bytes(std::span(why)));

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
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(
      message_of(error).find("rank 0 failed the group: rank 0 gave up") != std::string::npos,
      message_of(error));
}
