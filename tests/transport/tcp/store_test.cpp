// Tests for strata/transport/tcp/store.hpp: the one-shot address store, with threads as ranks on
// 127.0.0.1 — world sizes, start orders, missing and duplicate ranks, hostile connections, and
// the errors of each side.
#include <strata/transport/tcp/store.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

namespace {

using namespace std::chrono_literals;
using asio::ip::tcp;
using strata::transport::tcp::exchange;
using strata::transport::tcp::StoreOptions;

const asio::ip::address kLoopback = asio::ip::make_address("127.0.0.1");

// A port that was free a moment ago: bind 127.0.0.1:0, read the port, close.
std::uint16_t free_port() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(kLoopback, 0));
  return acceptor.local_endpoint().port();
}

StoreOptions options_for(std::uint16_t port, int rank, int world_size,
                         std::chrono::milliseconds timeout = 10s) {
  StoreOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  options.rank = rank;
  options.world_size = world_size;
  options.timeout = timeout;
  return options;
}

std::string value_of(int rank) {
  return "10.0.0." + std::to_string(rank) + ":4000" + "0";
}

// What one rank's call returned or threw (doctest's CHECKs are for the main thread only).
struct Outcome {
  std::optional<std::vector<std::string>> values;
  std::exception_ptr error;
  std::chrono::milliseconds took{0};
};

Outcome call(const StoreOptions& options, std::string_view value) {
  Outcome outcome;
  const auto start = std::chrono::steady_clock::now();
  try {
    outcome.values = exchange(options, value);
  } catch (...) {
    outcome.error = std::current_exception();
  }
  outcome.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return outcome;
}

struct Launch {
  StoreOptions options;
  std::string value;
  std::chrono::milliseconds delay{0};
};

// Runs every launch in its own thread, each after its delay; returns the outcomes in order.
std::vector<Outcome> run(const std::vector<Launch>& launches) {
  std::vector<Outcome> outcomes(launches.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < launches.size(); ++i) {
    threads.emplace_back([&, i] {
      std::this_thread::sleep_for(launches[i].delay);
      outcomes[i] = call(launches[i].options, launches[i].value);
    });
  }
  for (auto& thread : threads)
    thread.join();
  return outcomes;
}

// The message of the exception in `outcome` if it is an `E`, else a description of what it is.
template <class E>
std::optional<std::string> error_message(const Outcome& outcome) {
  if (!outcome.error) return std::nullopt;
  try {
    std::rethrow_exception(outcome.error);
  } catch (const E& e) {
    return std::string(e.what());
  } catch (const std::exception& e) {
    return std::nullopt;
  }
}

std::string describe(const Outcome& outcome) {
  if (!outcome.error) return outcome.values ? "returned a table" : "nothing";
  try {
    std::rethrow_exception(outcome.error);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

void check_success(const std::vector<Outcome>& outcomes, const std::vector<std::string>& table) {
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    CAPTURE(i);
    INFO(describe(outcomes[i]));
    REQUIRE(outcomes[i].values.has_value());
    CHECK(*outcomes[i].values == table);
  }
}

TEST_CASE("exchange: world sizes 1, 2, 3 and 5, ranks started in random order") {
  std::mt19937 random(12345);
  for (int world_size : {1, 2, 3, 5}) {
    for (int round = 0; round < 3; ++round) {
      CAPTURE(world_size);
      CAPTURE(round);
      const std::uint16_t port = free_port();
      std::vector<Launch> launches;
      std::vector<std::string> table;
      std::uniform_int_distribution<int> delay_ms(0, 150);
      for (int rank = 0; rank < world_size; ++rank) {
        table.push_back(value_of(rank));
        launches.push_back({options_for(port, rank, world_size), value_of(rank),
                            std::chrono::milliseconds(delay_ms(random))});
      }
      check_success(run(launches), table);
    }
  }
}

TEST_CASE("exchange: values may be empty, binary, or exactly the longest allowed") {
  const std::uint16_t port = free_port();
  std::string binary("\0\x01\xff\n:,[]", 9);
  const std::string longest(strata::transport::tcp::kMaxStoreValueBytes, 'x');
  const std::vector<std::string> table = {"", binary, longest, "d"};
  std::vector<Launch> launches;
  for (int rank = 0; rank < 4; ++rank)
    launches.push_back({options_for(port, rank, 4), table[static_cast<std::size_t>(rank)], {}});
  check_success(run(launches), table);
}

TEST_CASE("exchange: ranks that start long before rank 0 back off and retry") {
  const std::uint16_t port = free_port();
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3), value_of(0), 700ms},
                                             {options_for(port, 1, 3), value_of(1), 0ms},
                                             {options_for(port, 2, 3), value_of(2), 0ms}});
  check_success(outcomes, {value_of(0), value_of(1), value_of(2)});
  // Backoff is capped at ~1.5 s (1 s with jitter), so the clients finish soon after rank 0 is up.
  CHECK(outcomes[1].took < 3500ms);
  CHECK(outcomes[1].took >= 650ms);
}

TEST_CASE("exchange: world size 1 needs no store") {
  StoreOptions options;  // no host, no port
  CHECK(exchange(options, "only") == std::vector<std::string>{"only"});
}

TEST_CASE("exchange: a missing rank makes rank 0 time out naming it; the others learn why") {
  const std::uint16_t port = free_port();
  const std::string where = "127.0.0.1:" + std::to_string(port);
  // Rank 1 starts later, so that rank 0's deadline comes first and rank 1 hears its verdict.
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3, 1s), value_of(0), 0ms},
                                             {options_for(port, 1, 3, 1s), value_of(1), 300ms}});
  const auto server = error_message<strata::TimeoutError>(outcomes[0]);
  INFO(describe(outcomes[0]));
  REQUIRE(server.has_value());
  CHECK(*server == "strata: rank 0: store: rank 2 did not register with the store at " + where +
                       " within 1000 ms; check that every rank was started, with the same store "
                       "address and world size, or raise the timeout (StoreOptions::timeout or "
                       "STRATA_TIMEOUT)");
  CHECK(outcomes[0].took < 3s);
  const auto client = error_message<strata::TimeoutError>(outcomes[1]);
  INFO(describe(outcomes[1]));
  REQUIRE(client.has_value());
  CHECK(client->starts_with("strata: rank 1: store: "));
  CHECK(client->find("rank 2 did not register") != std::string::npos);
  CHECK(outcomes[1].took < 3s);
}

TEST_CASE("exchange: several missing ranks are listed") {
  const std::uint16_t port = free_port();
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 5, 1s), value_of(0), 0ms},
                                             {options_for(port, 1, 5, 1s), value_of(1), 300ms},
                                             {options_for(port, 3, 5, 1s), value_of(3), 350ms}});
  for (const Outcome& outcome : outcomes) {
    const auto message = error_message<strata::TimeoutError>(outcome);
    INFO(describe(outcome));
    REQUIRE(message.has_value());
    CHECK(message->find("ranks 2, 4 did not register with the store at 127.0.0.1:" +
                        std::to_string(port) + " within 1000 ms") != std::string::npos);
  }
}

TEST_CASE("exchange: a rank with no store to reach times out naming the address") {
  const std::uint16_t port = free_port();
  const Outcome outcome = call(options_for(port, 1, 2, 500ms), "v");
  const auto message = error_message<strata::TimeoutError>(outcome);
  INFO(describe(outcome));
  REQUIRE(message.has_value());
  CHECK(message->starts_with("strata: rank 1: store: could not reach the store at 127.0.0.1:" +
                             std::to_string(port) + " within 500 ms (last attempt: connect: "));
  CHECK(message->find("check that rank 0 is running") != std::string::npos);
  CHECK(outcome.took >= 490ms);
  CHECK(outcome.took < 2500ms);
}

TEST_CASE("exchange: two processes claiming the same rank fail every rank at once") {
  const std::uint16_t port = free_port();
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3), value_of(0), 0ms},
                                             {options_for(port, 1, 3), value_of(1), 0ms},
                                             {options_for(port, 1, 3), "impostor", 300ms}});
  const std::string why =
      "rank 1 registered twice with the store at 127.0.0.1:" + std::to_string(port);
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    CAPTURE(i);
    const auto message = error_message<strata::ConfigurationError>(outcomes[i]);
    INFO(describe(outcomes[i]));
    REQUIRE(message.has_value());
    CHECK(message->find(why) != std::string::npos);
    CHECK(message->find("give every process its own rank") != std::string::npos);
    CHECK(outcomes[i].took < 5s);  // not the 10 s timeout
  }
}

TEST_CASE("exchange: ranks that disagree about the world size fail naming both sizes") {
  const std::uint16_t port = free_port();
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3), value_of(0), 0ms},
                                             {options_for(port, 2, 3), value_of(2), 0ms},
                                             {options_for(port, 1, 4), value_of(1), 200ms}});
  const std::string why =
      "rank 1 registered with world size 4, but the store at 127.0.0.1:" + std::to_string(port) +
      " (rank 0) has world size 3";
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    CAPTURE(i);
    const auto message = error_message<strata::ConfigurationError>(outcomes[i]);
    INFO(describe(outcomes[i]));
    REQUIRE(message.has_value());
    CHECK(message->find(why) != std::string::npos);
    CHECK(message->find("start every rank with the same world size") != std::string::npos);
    CHECK(outcomes[i].took < 5s);
  }
}

// ---- hostile and broken peers ------------------------------------------------------------------

// Connects to 127.0.0.1:port, retrying until rank 0 listens (for up to 5 s).
tcp::socket connect_when_up(asio::io_context& io, std::uint16_t port) {
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (true) {
    tcp::socket socket(io);
    std::error_code ec;
    socket.connect(tcp::endpoint(kLoopback, port), ec);
    if (!ec) return socket;
    if (std::chrono::steady_clock::now() > give_up) throw std::system_error(ec);
    std::this_thread::sleep_for(10ms);
  }
}

std::vector<std::uint8_t> request(std::uint32_t magic, std::uint16_t version, std::uint16_t kind,
                                  std::uint32_t rank, std::uint32_t world_size,
                                  std::uint32_t value_bytes) {
  std::vector<std::uint8_t> bytes;
  const auto put = [&](std::uint32_t v, int n) {
    for (int i = n - 1; i >= 0; --i)
      bytes.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(magic, 4);
  put(version, 2);
  put(kind, 2);
  put(rank, 4);
  put(world_size, 4);
  put(value_bytes, 4);
  return bytes;
}

constexpr std::uint32_t kMagic = 0x53545253;

TEST_CASE("exchange: garbage, oversized, truncated and silent connections do not disturb it") {
  const std::uint16_t port = free_port();
  asio::io_context io;
  std::vector<tcp::socket> hostile;
  std::string version_reply;
  std::thread attacker([&] {
    std::mt19937 random(7);
    std::vector<std::uint8_t> noise(4096);
    for (auto& byte : noise)
      byte = static_cast<std::uint8_t>(random());
    std::error_code ignored;
    // Random bytes.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(noise), ignored);
    // The right magic and world size, but a value of 1 GiB.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(request(kMagic, 1, 1, 1, 3, 1u << 30)), ignored);
    // A length of 4 GiB - 1.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(request(kMagic, 1, 1, 2, 3, 0xffffffffu)), ignored);
    // A rank out of range.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(request(kMagic, 1, 1, 99, 3, 0)), ignored);
    // An unknown kind of request.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(request(kMagic, 1, 7, 1, 3, 0)), ignored);
    // A header announcing a value, then the connection closes.
    hostile.push_back(connect_when_up(io, port));
    asio::write(hostile.back(), asio::buffer(request(kMagic, 1, 1, 1, 3, 4)), ignored);
    hostile.back().close();
    // Half a header, then silence.
    hostile.back() = connect_when_up(io, port);
    auto truncated = request(kMagic, 1, 1, 1, 3, 8);
    asio::write(hostile.back(), asio::buffer(truncated.data(), 10), ignored);
    // A full header announcing 8 bytes, then only 3 of them.
    hostile.push_back(connect_when_up(io, port));
    auto short_value = request(kMagic, 1, 1, 2, 3, 8);
    short_value.insert(short_value.end(), {'a', 'b', 'c'});
    asio::write(hostile.back(), asio::buffer(short_value), ignored);
    // Connected, silent.
    hostile.push_back(connect_when_up(io, port));
    // Another protocol version: told why, then closed.
    tcp::socket old = connect_when_up(io, port);
    asio::write(old, asio::buffer(request(kMagic, 99, 1, 1, 3, 0)), ignored);
    std::array<char, 256> reply{};
    const std::size_t n = asio::read(old, asio::buffer(reply), ignored);
    version_reply.assign(reply.data(), n);
  });
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3), value_of(0), 0ms},
                                             {options_for(port, 1, 3), value_of(1), 400ms},
                                             {options_for(port, 2, 3), value_of(2), 450ms}});
  attacker.join();
  check_success(outcomes, {value_of(0), value_of(1), value_of(2)});
  CHECK(version_reply.find("speaks protocol version 1, the rank speaks version 99") !=
        std::string::npos);
}

TEST_CASE("exchange: a rank whose connection broke after registering may register again") {
  const std::uint16_t port = free_port();
  std::thread early([&] {
    asio::io_context io;
    tcp::socket socket = connect_when_up(io, port);
    auto bytes = request(kMagic, 1, 1, 2, 3, 3);
    bytes.insert(bytes.end(), {'o', 'l', 'd'});
    asio::write(socket, asio::buffer(bytes));
    std::this_thread::sleep_for(100ms);
    socket.close();  // gone before the table was sent
  });
  const std::vector<Outcome> outcomes = run({{options_for(port, 0, 3), value_of(0), 0ms},
                                             {options_for(port, 1, 3), value_of(1), 400ms},
                                             {options_for(port, 2, 3), value_of(2), 300ms}});
  early.join();
  check_success(outcomes, {value_of(0), value_of(1), value_of(2)});
}

TEST_CASE("exchange: rank 0 reports a port in use and suggests another") {
  asio::io_context io;
  tcp::acceptor holder(io, tcp::endpoint(kLoopback, 0));  // listening
  const std::uint16_t port = holder.local_endpoint().port();
  const Outcome outcome = call(options_for(port, 0, 2, 1s), "v");
  const auto message = error_message<strata::ConfigurationError>(outcome);
  INFO(describe(outcome));
  REQUIRE(message.has_value());
  CHECK(*message ==
        "strata: rank 0: store: cannot serve the store on 127.0.0.1:" + std::to_string(port) +
            ": the port is already in use; choose another port (MASTER_PORT or "
            "STRATA_STORE_PORT) or stop the process that holds it");
}

TEST_CASE("exchange: rank 0 refuses to serve on every interface or on another host") {
  StoreOptions any = options_for(free_port(), 0, 2, 1s);
  any.host = "0.0.0.0";
  const auto message = error_message<strata::ConfigurationError>(call(any, "v"));
  REQUIRE(message.has_value());
  CHECK(message->find("names every interface") != std::string::npos);

  StoreOptions foreign = options_for(free_port(), 0, 2, 1s);
  foreign.host = "192.0.2.1";  // TEST-NET-1: never an address of this host
  const Outcome outcome = call(foreign, "v");
  const auto not_local = error_message<strata::ConfigurationError>(outcome);
  INFO(describe(outcome));
  REQUIRE(not_local.has_value());
  CHECK(not_local->find("the address is not one of this host's") != std::string::npos);
}

// A fake rank 0 that accepts one connection and then does `act` with it.
template <class Act>
std::thread fake_store(tcp::acceptor& acceptor, Act act) {
  return std::thread([&acceptor, act] {
    tcp::socket socket = acceptor.accept();
    act(socket);
  });
}

TEST_CASE("exchange: a store that closes the connection makes the rank retry, then time out") {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(kLoopback, 0));
  const std::uint16_t port = acceptor.local_endpoint().port();
  std::atomic<int> connections{0};
  std::atomic<bool> stop{false};
  std::thread store([&] {
    // Accept and close every connection until the client has given up.
    acceptor.non_blocking(true);
    while (!stop.load()) {
      std::error_code ec;
      tcp::socket socket = acceptor.accept(ec);
      if (ec)
        std::this_thread::sleep_for(1ms);
      else
        connections.fetch_add(1);
    }
  });
  const Outcome outcome = call(options_for(port, 1, 2, 500ms), "v");
  stop.store(true);
  store.join();
  const auto message = error_message<strata::TimeoutError>(outcome);
  INFO(describe(outcome));
  REQUIRE(message.has_value());
  CHECK(connections.load() >= 2);  // it retried
  // The last attempt may still sit in the accept queue when the deadline passes (a loaded
  // machine can delay the fake store by more than the rank's last attempt has left): then the
  // rank reports that it registered and got no answer. Every other ending names the close.
  const std::string where = "store at 127.0.0.1:" + std::to_string(port);
  const bool closed = message->find("could not reach the " + where +
                                    " within 500 ms (last attempt: the store closed the "
                                    "connection)") != std::string::npos;
  const bool last_unanswered =
      message->find("registered with the " + where + ", but it did not answer within 500 ms") !=
      std::string::npos;
  CHECK((closed || last_unanswered));
}

TEST_CASE("exchange: a store that never answers makes the rank time out") {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(kLoopback, 0));
  const std::uint16_t port = acceptor.local_endpoint().port();
  std::thread store = fake_store(acceptor, [](tcp::socket& socket) {
    std::array<char, 64> sink{};
    std::error_code ec;
    asio::read(socket, asio::buffer(sink), ec);  // until the client closes
  });
  const Outcome outcome = call(options_for(port, 1, 2, 500ms), "v");
  store.join();
  const auto message = error_message<strata::TimeoutError>(outcome);
  INFO(describe(outcome));
  REQUIRE(message.has_value());
  CHECK(message->find("registered with the store at 127.0.0.1:" + std::to_string(port) +
                      ", but it did not answer within 500 ms") != std::string::npos);
}

TEST_CASE("exchange: a service that is not a store is named as such") {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(kLoopback, 0));
  const std::uint16_t port = acceptor.local_endpoint().port();
  std::thread store = fake_store(acceptor, [](tcp::socket& socket) {
    const std::string_view http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    std::error_code ec;
    asio::write(socket, asio::buffer(http), ec);
    std::array<char, 64> sink{};
    asio::read(socket, asio::buffer(sink), ec);
  });
  const Outcome outcome = call(options_for(port, 1, 2, 2s), "v");
  store.join();
  const auto message = error_message<strata::ConfigurationError>(outcome);
  INFO(describe(outcome));
  REQUIRE(message.has_value());
  CHECK(message->find("the service at 127.0.0.1:" + std::to_string(port) +
                      " is not a strata store of this version: its reply has the wrong magic "
                      "number") != std::string::npos);
}

TEST_CASE("exchange: bad options are usage errors") {
  const auto usage = [](const StoreOptions& options, std::string_view value) {
    return error_message<strata::UsageError>(call(options, value));
  };
  const std::string too_long(strata::transport::tcp::kMaxStoreValueBytes + 1, 'x');
  auto message = usage(options_for(1234, 1, 2), too_long);
  REQUIRE(message.has_value());
  CHECK(message->find("the value is 1025 bytes long; publish at most 1024 bytes per rank") !=
        std::string::npos);
  CHECK(usage(options_for(1234, 2, 2), "v").has_value());
  CHECK(usage(options_for(1234, -1, 2), "v").has_value());
  CHECK(usage(options_for(1234, 0, 0), "v").has_value());
  CHECK(
      usage(options_for(1234, 0, strata::transport::tcp::kMaxStoreWorldSize + 1), "v").has_value());
  CHECK(usage(options_for(0, 1, 2), "v").has_value());
  CHECK(usage(options_for(1234, 1, 2, 0ms), "v").has_value());
  StoreOptions no_host = options_for(1234, 1, 2);
  no_host.host.clear();
  message = usage(no_host, "v");
  REQUIRE(message.has_value());
  CHECK(message->find("incomplete") != std::string::npos);
}

TEST_CASE("local_address_toward: the loopback routes to itself") {
  CHECK(strata::transport::tcp::local_address_toward("127.0.0.1", 1234) == "127.0.0.1");
  CHECK(strata::transport::tcp::local_address_toward("127.0.0.1", 0) == "127.0.0.1");
  const std::string localhost = strata::transport::tcp::local_address_toward("localhost", 29500);
  CHECK((localhost == "127.0.0.1" || localhost == "::1"));
}

}  // namespace
