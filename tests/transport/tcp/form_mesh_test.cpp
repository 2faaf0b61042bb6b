// Tests for strata/transport/tcp/form_mesh.hpp: how a group's mesh ends forming.
//   - a rank that forms its mesh and leaves at once never makes a slower peer wait for it
//     (the race that turned a count mismatch into a rendezvous timeout);
//   - a peer that connects and dies before its kMeshReady is forgotten and its next
//     incarnation joins in its place; when that peer has the lower rank, this rank connects
//     to it again;
//   - a peer that connects but never says kMeshReady, or says something else: a clear error.
// The misbehaving peers are written here from the handshake's byte layout (handshake.hpp).
#include <strata/transport/tcp/form_mesh.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>

namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;
using strata::Deadline;
using strata::cluster::Address;
namespace wire = strata::transport::tcp;

constexpr std::uint64_t kCluster = 0x5eed'c1a5'7e40'0001ULL;
constexpr std::uint64_t kTunables = 0x7777'0000'1234'5678ULL;

// Listening sockets on free loopback ports, handed to the meshes (no window for another
// program to take a port between choosing and binding it).
struct Ports {
  explicit Ports(int n) {
    for (int r = 0; r < n; ++r) {
      acceptors.emplace_back(io, tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
      addresses.push_back(Address{"127.0.0.1", acceptors.back().local_endpoint().port()});
    }
  }
  wire::MeshConfig config(int rank, int data_connections) {
    wire::MeshConfig config;
    config.rank = rank;
    config.addresses = addresses;
    config.cluster = kCluster;
    config.tunables = kTunables;
    config.data_connections = data_connections;
    config.listen_fd = acceptors[static_cast<std::size_t>(rank)].release();
    return config;
  }
  asio::io_context io;
  std::vector<tcp::acceptor> acceptors;
  std::vector<Address> addresses;
};

// Rank `rank` of a group of `world` ranks, done by hand: connects every connection to rank 0 and
// completes the handshake, then does only what a test tells it to.
struct HandmadePeer {
  HandmadePeer(const Address& rank0, int rank, int world, int data_connections) {
    std::array<std::byte, 8> incarnation{};
    wire::random_bytes(incarnation);
    for (int index = 0; index <= data_connections; ++index) {
      auto& socket = sockets.emplace_back(io);
      const auto until = std::chrono::steady_clock::now() + 5s;
      for (;;) {  // rank 0 may not listen yet
        std::error_code ec;
        socket.connect(tcp::endpoint(asio::ip::make_address_v4(rank0.host), rank0.port), ec);
        if (!ec) break;
        socket.close();
        REQUIRE(std::chrono::steady_clock::now() < until);
        std::this_thread::sleep_for(10ms);
      }
      wire::Hello hello;
      hello.connection = static_cast<std::uint16_t>(index);
      hello.rank = rank;
      hello.world_size = world;
      hello.cluster = kCluster;
      hello.tunables = kTunables;
      hello.incarnation = wire::detail::load_le<std::uint64_t>(incarnation.data());
      wire::random_bytes(hello.nonce);
      const auto hello_bytes = wire::encode(hello);
      asio::write(socket, asio::buffer(hello_bytes));
      // Without a token: the acceptor's status and Hello, then our verdict on it.
      std::array<std::byte, 1 + wire::kHelloBytes> reply{};
      asio::read(socket, asio::buffer(reply));
      REQUIRE(static_cast<wire::HandshakeStatus>(reply[0]) == wire::HandshakeStatus::accepted);
      const auto accepted = static_cast<std::byte>(wire::HandshakeStatus::accepted);
      asio::write(socket, asio::buffer(&accepted, 1));
    }
  }
  void say(std::byte byte) { asio::write(sockets[0], asio::buffer(&byte, 1)); }
  void close() {
    for (auto& socket : sockets)
      socket.close();
  }
  asio::io_context io;
  std::vector<tcp::socket> sockets;
};

// Rank 0 of a group of two, done by hand: accepts rank 1's connections on `acceptor`, completes
// the acceptor's side of each handshake, waits for rank 1's kMeshReady and closes everything.
void accept_then_die(tcp::acceptor& acceptor, int data_connections) {
  std::array<std::byte, 8> incarnation{};
  wire::random_bytes(incarnation);
  std::vector<tcp::socket> sockets;
  std::size_t control = 0;
  for (int accepted = 0; accepted <= data_connections; ++accepted) {
    tcp::socket socket = acceptor.accept();
    wire::HelloBytes theirs_bytes{};
    asio::read(socket, asio::buffer(theirs_bytes));
    wire::Hello theirs;
    REQUIRE(wire::decode(theirs_bytes, theirs));
    REQUIRE(theirs.rank == 1);
    if (theirs.connection == 0) control = sockets.size();
    wire::Hello mine;
    mine.connection = theirs.connection;
    mine.rank = 0;
    mine.world_size = 2;
    mine.cluster = kCluster;
    mine.tunables = kTunables;
    mine.incarnation = wire::detail::load_le<std::uint64_t>(incarnation.data());
    wire::random_bytes(mine.nonce);
    const auto mine_bytes = wire::encode(mine);
    std::array<std::byte, 1 + wire::kHelloBytes> reply{};  // without a token: no challenge
    reply[0] = static_cast<std::byte>(wire::HandshakeStatus::accepted);
    std::copy(mine_bytes.begin(), mine_bytes.end(), reply.begin() + 1);
    asio::write(socket, asio::buffer(reply));
    std::byte verdict{};
    asio::read(socket, asio::buffer(&verdict, 1));
    REQUIRE(verdict == static_cast<std::byte>(wire::HandshakeStatus::accepted));
    sockets.push_back(std::move(socket));
  }
  // Rank 1 holds its whole mesh once its kMeshReady comes: closing now leaves nothing unread.
  std::byte ready{};
  asio::read(sockets[control], asio::buffer(&ready, 1));
  REQUIRE(ready == wire::kMeshReady);
  for (auto& socket : sockets)
    socket.close();
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("a rank that forms its mesh and leaves at once does not make its peers wait for it") {
  // Before kMeshReady, rank 0 could still be finishing its last handshake when rank 1, already
  // done, closed everything: rank 0 took rank 1 for a dead incarnation and waited for it to the
  // deadline. Now rank 1 cannot finish before rank 0 holds its whole mesh.
  for (int round = 0; round < 40; ++round) {
    CAPTURE(round);
    const int world = 2 + round % 3;
    const int data_connections = 1 + round % 2;
    Ports ports(world);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&, r, config = ports.config(r, data_connections)] {
        try {
          auto mesh = wire::form_mesh(config, Deadline::after(5s));
          CHECK(mesh->size() == world);
          CHECK(mesh->ranks_on_this_host() == world);  // all on loopback
          // The highest rank leaves at once; the others keep their mesh a moment.
          if (r != world - 1) std::this_thread::sleep_for(20ms);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    for (auto& rank : ranks)
      rank.join();
    for (int r = 0; r < world; ++r) {
      CAPTURE(r);
      const auto& error = errors[static_cast<std::size_t>(r)];
      CHECK_MESSAGE(!error, (error ? message_of(error) : std::string()));
    }
  }
}

TEST_CASE("a peer that dies before its kMeshReady is forgotten and its next incarnation joins") {
  Ports ports(2);
  std::exception_ptr error;
  std::unique_ptr<wire::Mesh> mesh;
  std::thread rank0([&, config = ports.config(0, 1)] {
    try {
      mesh = wire::form_mesh(config, Deadline::after(8s));
    } catch (...) {
      error = std::current_exception();
    }
  });
  {
    HandmadePeer first(ports.addresses[0], 1, 2, 1);
    first.close();  // dies without kMeshReady
  }
  std::this_thread::sleep_for(50ms);
  auto second = wire::form_mesh(ports.config(1, 1), Deadline::after(8s));
  rank0.join();
  REQUIRE_MESSAGE(!error, message_of(error));
  REQUIRE(mesh);
  CHECK(mesh->size() == 2);
  CHECK(second->size() == 2);
}

TEST_CASE("a lower peer that dies before its kMeshReady is connected to again") {
  Ports ports(2);
  std::exception_ptr error;
  std::unique_ptr<wire::Mesh> mesh;
  std::thread rank1([&, config = ports.config(1, 1)] {
    try {
      mesh = wire::form_mesh(config, Deadline::after(8s));
    } catch (...) {
      error = std::current_exception();
    }
  });
  accept_then_die(ports.acceptors[0], 1);  // rank 0's first incarnation
  // Rank 1 connects again on its own; the connections wait in the listening socket's queue.
  std::unique_ptr<wire::Mesh> second;
  std::exception_ptr second_error;
  try {
    second = wire::form_mesh(ports.config(0, 1), Deadline::after(8s));
  } catch (...) {
    second_error = std::current_exception();
  }
  rank1.join();
  REQUIRE_MESSAGE(!error, message_of(error));
  REQUIRE_MESSAGE(!second_error, message_of(second_error));
  REQUIRE(second);
  REQUIRE(mesh);
  CHECK(mesh->size() == 2);
  CHECK(second->size() == 2);
}

TEST_CASE("a peer that connects but does not finish joining: the timeout says so") {
  Ports ports(2);
  std::exception_ptr error;
  std::thread rank0([&, config = ports.config(0, 1)] {
    try {
      wire::form_mesh(config, Deadline::after(700ms));
    } catch (...) {
      error = std::current_exception();
    }
  });
  HandmadePeer silent(ports.addresses[0], 1, 2, 1);
  rank0.join();
  REQUIRE(error);
  const std::string message = message_of(error);
  CHECK_MESSAGE(message.find("rank 1 connected but did not finish joining within 700 ms") !=
                    std::string::npos,
                message);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::TimeoutError);
}

TEST_CASE("a peer that dies before its kMeshReady and never comes back: the timeout says so") {
  Ports ports(2);
  std::exception_ptr error;
  std::thread rank0([&, config = ports.config(0, 1)] {
    try {
      wire::form_mesh(config, Deadline::after(700ms));
    } catch (...) {
      error = std::current_exception();
    }
  });
  HandmadePeer(ports.addresses[0], 1, 2, 1).close();
  rank0.join();
  REQUIRE(error);
  const std::string message = message_of(error);
  CHECK_MESSAGE(message.find("rank 1 did not join the group within 700 ms") != std::string::npos,
                message);
  CHECK_MESSAGE(
      message.find("closed its connections before the group was complete") != std::string::npos,
      message);
}

TEST_CASE("a peer that says something else than kMeshReady is a peer failure naming it") {
  Ports ports(2);
  std::exception_ptr error;
  std::thread rank0([&, config = ports.config(0, 2)] {
    try {
      wire::form_mesh(config, Deadline::after(5s));
    } catch (...) {
      error = std::current_exception();
    }
  });
  HandmadePeer odd(ports.addresses[0], 1, 2, 2);
  odd.say(std::byte{0x00});
  rank0.join();
  REQUIRE(error);
  CHECK_THROWS_AS(std::rethrow_exception(error), strata::PeerFailureError);
  CHECK_MESSAGE(message_of(error).find("rank 1 (127.0.0.1:") != std::string::npos,
                message_of(error));
}
