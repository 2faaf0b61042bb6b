// Tests for the failure semantics of strata/communicator/tcp.hpp, with every rank a thread of
// this process on loopback: mismatched calls raise MismatchError on every rank, a stalled rank
// makes the others time out naming it, abort() releases every rank, a failed group refuses
// later calls; rendezvous names missing ranks, ports in use, addresses of other machines and
// wrong cluster tokens, and survives hostile bytes on its port; listening sockets bind the
// task's address only and close once the group is formed; the cluster token never crosses the
// wire. Failures of real processes (SIGKILL, SIGSTOP) are in
// tcp_process_test.cpp.
#include <strata/cluster/resolve.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/transport/tcp/handshake.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <list>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include "exceptions.hpp"
#include "loopback_ports.hpp"

namespace {

using namespace std::chrono_literals;
using strata::communicator::CallOptions;
using strata::communicator::CommunicatorOptions;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpMembership;
using strata::communicator::TcpOptions;
using strata::testing::holds;
using strata::testing::message_of;
using Address = strata::cluster::Address;

// Runs body(rank) on one thread per rank and returns each rank's exception (nullptr if none).
std::vector<std::exception_ptr> run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  return errors;
}

using Ports = strata::testing::LoopbackPorts;

// The ranks of these groups are threads of one process, so by default they move data through
// shared memory; the failure semantics are the same either way, and tested both ways.
TcpOptions transport(bool shared_memory) {
  TcpOptions tcp;
  tcp.shared_memory = shared_memory;
  return tcp;
}

CommunicatorOptions deadline(std::chrono::milliseconds timeout) {
  CommunicatorOptions options;
  options.timeout = timeout;
  return options;
}

// Ports that were free a moment ago (bound by the kernel's choice, then closed), for clusters
// whose ranks bind their own listening sockets.
std::vector<std::uint16_t> free_ports(int n) {
  asio::io_context io;
  std::vector<asio::ip::tcp::acceptor> held;
  std::vector<std::uint16_t> ports;
  for (int k = 0; k < n; ++k) {
    held.emplace_back(io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
    ports.push_back(held.back().local_endpoint().port());
  }
  return ports;
}

// The membership of worker `index` of a two-worker TF_CONFIG cluster at `first` and `second`,
// as resolve_cluster() and membership_of() give it to a program.
TcpMembership membership_from_tf_config(const std::string& first, const std::string& second,
                                        int index) {
  strata::cluster::ResolveOptions options;
  options.environment = strata::cluster::environment_from(
      {{"TF_CONFIG",
        fmt::format(R"({{"cluster": {{"worker": ["{}", "{}"]}}, "task": {{"type": "worker", )"
                    R"("index": {}}}}})",
                    first, second, index)}});
  auto resolved = strata::cluster::resolve_cluster(options);
  return strata::communicator::membership_of(resolved);
}

// The local addresses of this network namespace's TCP sockets listening on `port`, read from
// the kernel's tables (/proc/net/tcp and tcp6): what `ss -ltn` shows.
std::vector<std::string> listening_addresses(std::uint16_t port) {
  std::vector<std::string> found;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot;
      std::string local;
      std::string remote;
      std::string state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.find(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: TCP_LISTEN
      if (std::stoul(local.substr(colon + 1), nullptr, 16) != port) continue;
      // The address is printed as 32-bit words of its network-order bytes, each in host order.
      const std::string hex = local.substr(0, colon);
      std::array<unsigned char, 16> bytes{};
      const std::size_t words = hex.size() / 8;
      for (std::size_t w = 0; w < words && w < 4; ++w) {
        const auto word = static_cast<std::uint32_t>(std::stoul(hex.substr(8 * w, 8), nullptr, 16));
        std::memcpy(&bytes[4 * w], &word, sizeof word);
      }
      std::array<char, INET6_ADDRSTRLEN> text{};
      ::inet_ntop(words == 1 ? AF_INET : AF_INET6, bytes.data(), text.data(), text.size());
      found.emplace_back(text.data());
    }
  }
  return found;
}

// 0 when a TCP connection to host:port succeeds, else the errno of connect().
int connect_errno(const char* host, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(port);
  REQUIRE(::inet_pton(AF_INET, host, &target.sin_addr) == 1);
  const int result = ::connect(fd, reinterpret_cast<const sockaddr*>(&target), sizeof target);
  const int error = result == 0 ? 0 : errno;
  ::close(fd);
  return error;
}

// A TCP relay on 127.0.0.1 that forwards every connection to 127.0.0.1:`target` and records
// the bytes of both directions: a wiretap between two ranks.
class Wiretap {
 public:
  explicit Wiretap(std::uint16_t target) : target_(target) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof local;
    REQUIRE(::bind(listener_, reinterpret_cast<const sockaddr*>(&local), sizeof local) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&local), &size) == 0);
    port_ = ntohs(local.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  Wiretap(const Wiretap&) = delete;
  Wiretap& operator=(const Wiretap&) = delete;
  ~Wiretap() { stop(); }

  std::uint16_t port() const noexcept { return port_; }

  // Stops accepting and waits until both ends of every relayed connection have closed.
  void stop() {
    stopping_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& pump : pumps_)
      if (pump.joinable()) pump.join();
    for (int fd : fds_)
      ::close(fd);
    fds_.clear();
    if (listener_ >= 0) ::close(listener_);
    listener_ = -1;
  }

  // What each side sent on each connection: [2k] from the connecting side, [2k+1] from the
  // accepting side of connection k. Call after stop().
  const std::list<std::string>& streams() const noexcept { return streams_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 20) <= 0) continue;  // re-check stopping_ now and then
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in target{};
      target.sin_family = AF_INET;
      target.sin_port = htons(target_);
      target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (server < 0 ||
          ::connect(server, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
        ::close(client);
        if (server >= 0) ::close(server);
        continue;
      }
      fds_.push_back(client);
      fds_.push_back(server);
      std::string& upstream = streams_.emplace_back();
      std::string& downstream = streams_.emplace_back();
      pumps_.emplace_back([client, server, &upstream] { pump(client, server, upstream); });
      pumps_.emplace_back([client, server, &downstream] { pump(server, client, downstream); });
    }
  }

  // Copies `from` to `to` until `from` ends, recording the bytes; then ends `to`'s direction.
  static void pump(int from, int to, std::string& record) {
    std::array<char, 65536> buffer{};
    for (;;) {
      const auto n = ::read(from, buffer.data(), buffer.size());
      if (n <= 0) break;
      record.append(buffer.data(), static_cast<std::size_t>(n));
      for (ssize_t sent = 0; sent < n;) {
        const auto k = ::write(to, buffer.data() + sent, static_cast<std::size_t>(n - sent));
        if (k <= 0) break;
        sent += k;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  // Owned by the accept loop until stop() joins it; each stream is written by one pump only.
  std::list<std::string> streams_;
  std::vector<std::thread> pumps_;
  std::vector<int> fds_;
};

// Sets an environment variable for the lifetime of the guard (no other thread may run then).
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;  // NOLINT(concurrency-mt-unsafe)
    ::setenv(name, value, 1);                             // NOLINT(concurrency-mt-unsafe)
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  ~ScopedEnvironment() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
    else
      ::unsetenv(name_);  // NOLINT(concurrency-mt-unsafe)
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("ranks that disagree on count, type, op, root or kind all raise MismatchError") {
  struct Case {
    std::string name;
    std::function<void(TcpCommunicator&, std::vector<float>&, std::vector<double>&)> call;
  };
  const std::vector<Case> cases = {
      {"count",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>&) {
         c.all_reduce(std::span(f).first(c.rank() == 2 ? 100 : 64), strata::ReduceOp::sum);
       }},
      {"type",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>& d) {
         if (c.rank() == 1)
           c.all_reduce(std::span(d).first(64), strata::ReduceOp::sum);
         else
           c.all_reduce(std::span(f).first(64), strata::ReduceOp::sum);
       }},
      {"op",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>&) {
         c.all_reduce(std::span(f).first(64),
                      c.rank() == 0 ? strata::ReduceOp::max : strata::ReduceOp::sum);
       }},
      {"root",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>&) {
         c.broadcast(std::span(f).first(64), c.rank() == 2 ? 1 : 0);
       }},
      {"kind",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>&) {
         if (c.rank() == 1)
           c.reduce(std::span(f).first(64), strata::ReduceOp::sum, 0);
         else
           c.all_reduce(std::span(f).first(64), strata::ReduceOp::sum);
       }},
      {"number of calls",
       [](TcpCommunicator& c, std::vector<float>& f, std::vector<double>&) {
         if (c.rank() == 0) c.barrier();
         c.all_reduce(std::span(f).first(64), strata::ReduceOp::sum);
       }},
  };
  for (const auto& test : cases)
    for (const bool shared : {true, false}) {
      CAPTURE(test.name);
      CAPTURE(shared);
      auto group = TcpCommunicator::create(3, deadline(10s), transport(shared));
      REQUIRE(group[0].uses_shared_memory() == shared);
      const auto start = std::chrono::steady_clock::now();
      // Every rank raises in the call itself when its part depends on the others (all-reduce
      // does); a rank whose part of a broadcast or reduce needs nothing from the disagreeing
      // ranks may return first, and raises at its next call instead.
      const bool may_raise_later = test.name == "root" || test.name == "kind";
      std::vector<char> raised_in_call(3, 0);
      auto errors = run_ranks(3, [&](int r) {
        std::vector<float> f(100, 1.0F);
        std::vector<double> d(100, 1.0);
        auto& comm = group[static_cast<std::size_t>(r)];
        try {
          test.call(comm, f, d);
        } catch (...) {
          raised_in_call[static_cast<std::size_t>(r)] = 1;
          throw;
        }
        comm.barrier();
      });
      if (!may_raise_later)
        for (int r = 0; r < 3; ++r) {
          CAPTURE(r);
          CHECK(raised_in_call[static_cast<std::size_t>(r)]);
        }
      // Well before the 10 s deadline: the mismatch is caught by the message headers.
      CHECK(std::chrono::steady_clock::now() - start < 5s);
      bool named_both_views = false;
      for (int r = 0; r < 3; ++r) {
        CAPTURE(r);
        const auto& error = errors[static_cast<std::size_t>(r)];
        CHECK_MESSAGE(holds<strata::MismatchError>(error), message_of(error));
        const std::string message = message_of(error);
        if (message.find("but rank") != std::string::npos ||
            message.find(" is in collective #") != std::string::npos)
          named_both_views = true;
      }
      CHECK(named_both_views);
      // The group is failed: later calls refuse at once, on every rank.
      auto later = run_ranks(3, [&](int r) { group[static_cast<std::size_t>(r)].barrier(); });
      for (const auto& error : later) {
        CHECK(holds<strata::MismatchError>(error));
        CHECK(message_of(error).find("failed in an earlier call") != std::string::npos);
      }
    }
}

TEST_CASE("a rank that never calls makes the others time out naming it") {
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    auto group = TcpCommunicator::create(3, deadline(10s), transport(shared));
    const auto start = std::chrono::steady_clock::now();
    auto errors = run_ranks(3, [&](int r) {
      if (r == 2) {
        std::this_thread::sleep_for(3s);  // busy elsewhere: not inside a collective
        return;
      }
      std::vector<float> data(1000, 1.0F);
      group[static_cast<std::size_t>(r)].all_reduce(std::span(data), strata::ReduceOp::sum,
                                                    CallOptions{.timeout = 800ms});
    });
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      const auto& error = errors[static_cast<std::size_t>(r)];
      REQUIRE(error);
      CHECK_MESSAGE(holds<strata::TimeoutError>(error), message_of(error));
      CHECK_MESSAGE(message_of(error).find("2 did not answer") != std::string::npos,
                    message_of(error));
    }
    CHECK_FALSE(errors[2]);
  }
}

TEST_CASE("abort() from another thread releases every rank with the reason") {
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    auto group = TcpCommunicator::create(3, deadline(20s), transport(shared));
    const auto start = std::chrono::steady_clock::now();
    auto errors = run_ranks(4, [&](int r) {
      if (r == 3) {  // a watchdog thread of rank 1
        std::this_thread::sleep_for(200ms);
        group[1].abort("the watchdog gave up");
        return;
      }
      std::vector<float> data(1 << 20, 1.0F);
      if (r == 0) std::this_thread::sleep_for(5s);  // rank 0 arrives late: ranks 1, 2 wait
      group[static_cast<std::size_t>(r)].all_reduce(std::span(data), strata::ReduceOp::sum);
    });
    CHECK(std::chrono::steady_clock::now() - start < 8s);
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      const auto& error = errors[static_cast<std::size_t>(r)];
      REQUIRE(error);
      CHECK_MESSAGE(holds<strata::PeerFailureError>(error), message_of(error));
      CHECK(message_of(error).find("the watchdog gave up") != std::string::npos);
    }
  }
}

TEST_CASE("a peer's abort reason reaches the others escaped: no control bytes, no bad UTF-8") {
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    auto group = TcpCommunicator::create(2, deadline(20s), transport(shared));
    auto errors = run_ranks(3, [&](int r) {
      if (r == 2) {  // a thread of rank 1 aborts with bytes meant for a terminal
        std::this_thread::sleep_for(200ms);
        group[1].abort("bad\x1b[2J\nline\xff");
        return;
      }
      std::vector<float> data(16, 1.0F);
      if (r == 1) std::this_thread::sleep_for(2s);  // rank 0 waits in the call
      group[static_cast<std::size_t>(r)].all_reduce(std::span(data), strata::ReduceOp::sum);
    });
    const auto& error = errors[0];
    REQUIRE(error);
    CHECK_MESSAGE(holds<strata::PeerFailureError>(error), message_of(error));
    const std::string text = message_of(error);
    CHECK_MESSAGE(text.find("bad\\x1b[2J\\x0aline\\xff") != std::string::npos, text);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find('\n') == std::string::npos);
    CHECK(text.find('\xff') == std::string::npos);
  }
}

TEST_CASE("a usage error on one rank fails the group for the others at once") {
  for (const bool shared : {true, false}) {
    CAPTURE(shared);
    auto group = TcpCommunicator::create(2, deadline(10s), transport(shared));
    const auto start = std::chrono::steady_clock::now();
    auto errors = run_ranks(2, [&](int r) {
      std::vector<float> send(10, 1.0F);
      std::vector<float> recv(r == 1 ? 9 : 10);  // rank 1's output is too short
      group[static_cast<std::size_t>(r)].all_reduce(std::span<const float>(send), std::span(recv),
                                                    strata::ReduceOp::sum);
    });
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK_MESSAGE(holds<strata::UsageError>(errors[1]), message_of(errors[1]));
    CHECK_MESSAGE(holds<strata::PeerFailureError>(errors[0]), message_of(errors[0]));
    CHECK(message_of(errors[0]).find("recv has 9 elements") != std::string::npos);
  }
}

TEST_CASE("rendezvous lists the ranks that did not join") {
  Ports ports(4);
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, [&](int r) {
    TcpCommunicator comm(ports.membership(r), {}, deadline(1s));  // ranks 2 and 3 never start
  });
  CHECK(std::chrono::steady_clock::now() - start < 4s);
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    CHECK(holds<strata::TimeoutError>(errors[static_cast<std::size_t>(r)]));
    CHECK(message_of(errors[static_cast<std::size_t>(r)]).find("ranks 2, 3 did not join") !=
          std::string::npos);
  }
}

TEST_CASE("a port already in use is a configuration error naming it") {
  asio::io_context io;
  asio::ip::tcp::acceptor holder(
      io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
  const auto port = holder.local_endpoint().port();
  std::vector<Address> addresses = {{"127.0.0.1", port}, {"127.0.0.1", 1}};
  try {
    TcpCommunicator comm(TcpMembership{0, addresses}, {}, deadline(1s));
    FAIL("no error");
  } catch (const strata::ConfigurationError& e) {
    CHECK(std::string(e.what()).find(fmt::format("port {}", port)) != std::string::npos);
    CHECK(std::string(e.what()).find("already in use") != std::string::npos);
  }
}

TEST_CASE(
    "ranks with different cluster tokens are refused, and the token never matters when "
    "equal") {
  SUBCASE("equal tokens form a group") {
    Ports ports(2);
    auto errors = run_ranks(2, [&](int r) {
      TcpOptions tcp;
      tcp.cluster_token = "s3cret";
      TcpCommunicator comm(ports.membership(r), tcp, deadline(5s));
      std::vector<int> data{r + 1};
      comm.all_reduce(std::span(data), strata::ReduceOp::sum);
      CHECK(data[0] == 3);
    });
    CHECK_FALSE(errors[0]);
    CHECK_FALSE(errors[1]);
  }
  SUBCASE("different tokens") {
    Ports ports(2);
    auto errors = run_ranks(2, [&](int r) {
      TcpOptions tcp;
      tcp.cluster_token = r == 0 ? "s3cret" : "guess";
      TcpCommunicator comm(ports.membership(r), tcp, deadline(1500ms));
    });
    REQUIRE(errors[1]);
    CHECK(holds<strata::ConfigurationError>(errors[1]));
    CHECK(message_of(errors[1]).find("tokens (STRATA_CLUSTER_TOKEN) differ") != std::string::npos);
    REQUIRE(errors[0]);
    CHECK(message_of(errors[0]).find("tokens (STRATA_CLUSTER_TOKEN) differ") != std::string::npos);
  }
  SUBCASE("a token on one side only") {
    Ports ports(2);
    auto errors = run_ranks(2, [&](int r) {
      TcpOptions tcp;
      if (r == 0) tcp.cluster_token = "s3cret";
      TcpCommunicator comm(ports.membership(r), tcp, deadline(1500ms));
    });
    REQUIRE(errors[1]);
    CHECK(holds<strata::ConfigurationError>(errors[1]));
    CHECK(message_of(errors[1]).find("requires a cluster token") != std::string::npos);
  }
}

TEST_CASE("ranks with different TCP tunables or cluster specs are refused with the reason") {
  Ports ports(2);
  auto errors = run_ranks(2, [&](int r) {
    TcpOptions tcp;
    tcp.chunk_bytes = r == 0 ? 4096 : 8192;
    TcpCommunicator comm(ports.membership(r), tcp, deadline(1500ms));
  });
  REQUIRE(errors[1]);
  CHECK(holds<strata::ConfigurationError>(errors[1]));
  CHECK(message_of(errors[1]).find("different TCP tunables") != std::string::npos);
}

TEST_CASE("ranks given different cluster specs are refused with the reason") {
  Ports ports(2);
  auto errors = run_ranks(2, [&](int r) {
    auto membership = ports.membership(r);
    membership.cluster_fingerprint = r == 0 ? 0x1111 : 0x2222;
    TcpCommunicator comm(std::move(membership), {}, deadline(1500ms));
  });
  REQUIRE(errors[1]);
  CHECK_MESSAGE(holds<strata::ConfigurationError>(errors[1]), message_of(errors[1]));
  CHECK(message_of(errors[1]).find("different cluster specs") != std::string::npos);
  REQUIRE(errors[0]);  // rank 0 never hears from a rank of its own cluster
}

TEST_CASE("ranks that disagree on the world size are refused with the reason") {
  Ports ports(3);
  auto errors = run_ranks(2, [&](int r) {
    auto membership = ports.membership(r);
    if (r == 0) membership.addresses.resize(2);  // rank 0 believes in 2 ranks, rank 1 in 3
    membership.cluster_fingerprint = 0x3333;     // the same cluster otherwise
    TcpCommunicator comm(std::move(membership), {}, deadline(1500ms));
  });
  REQUIRE(errors[1]);
  CHECK_MESSAGE(holds<strata::ConfigurationError>(errors[1]), message_of(errors[1]));
  CHECK_MESSAGE(message_of(errors[1]).find("disagree on the world size") != std::string::npos,
                message_of(errors[1]));
  ::close(ports.fds[2]);
}

TEST_CASE("a restarted rank's second incarnation is refused while the first is connected") {
  // Rank 1 runs three times on the same listening socket (dup'ed): incarnation A joins and waits
  // for rank 2, which comes late; B starts while A is still connected and must be refused; A
  // gives up; C starts after A is gone and forms the group with ranks 0 and 2.
  Ports ports(3);
  const int fd_b = ::dup(ports.fds[1]);
  const int fd_c = ::dup(ports.fds[1]);
  REQUIRE(fd_b >= 0);
  REQUIRE(fd_c >= 0);
  std::vector<float> sums(3, 0.0F);
  auto errors = run_ranks(5, [&](int who) {
    const auto run = [&](TcpMembership membership, std::chrono::milliseconds budget, int slot) {
      TcpCommunicator comm(std::move(membership), {}, deadline(budget));
      float value = static_cast<float>(comm.rank() + 1);
      comm.all_reduce(std::span(&value, 1), strata::ReduceOp::sum);
      sums[static_cast<std::size_t>(slot)] = value;
    };
    switch (who) {
      case 0:  // rank 0
        run(ports.membership(0), 8s, 0);
        break;
      case 1:  // rank 1, incarnation A: times out waiting for rank 2
        run(ports.membership(1), 1500ms, 1);
        break;
      case 2: {  // rank 1, incarnation B, while A is connected
        std::this_thread::sleep_for(500ms);
        auto membership = ports.membership(1);
        membership.listen_fd = fd_b;
        run(std::move(membership), 800ms, 1);
        break;
      }
      case 3: {  // rank 1, incarnation C, after A is gone
        std::this_thread::sleep_for(2500ms);
        auto membership = ports.membership(1);
        membership.listen_fd = fd_c;
        run(std::move(membership), 5s, 1);
        break;
      }
      case 4:  // rank 2, late
        std::this_thread::sleep_for(2500ms);
        run(ports.membership(2), 5s, 2);
        break;
    }
  });
  CHECK_MESSAGE(holds<strata::TimeoutError>(errors[1]), message_of(errors[1]));  // A
  REQUIRE(errors[2]);                                                            // B
  // B keeps retrying (A may be about to die) until its deadline, then says who refused it.
  CHECK_MESSAGE(holds<strata::TimeoutError>(errors[2]), message_of(errors[2]));
  CHECK(message_of(errors[2]).find("another incarnation of this rank is already connected") !=
        std::string::npos);
  for (int who : {0, 3, 4}) {
    CAPTURE(who);
    CHECK_MESSAGE(!errors[static_cast<std::size_t>(who)],
                  message_of(errors[static_cast<std::size_t>(who)]));
  }
  CHECK(sums == std::vector<float>{6.0F, 6.0F, 6.0F});
}

// A blocking TCP connection to 127.0.0.1:`port` (a listening socket: it accepts at once).
int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

// A stranger's connection to 127.0.0.1:`port`: sends `hello`, then `mac` once `before_mac`
// bytes have arrived (when `mac` is given), and returns every byte received until the peer
// closes the connection (or 5 s pass).
std::vector<std::byte> probe(std::uint16_t port, const strata::transport::tcp::Hello& hello,
                             std::optional<strata::transport::tcp::Mac> mac = std::nullopt,
                             std::size_t before_mac = 0) {
  const int fd = connect_loopback(port);
  const auto bytes = strata::transport::tcp::encode(hello);
  REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
  std::vector<std::byte> received;
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < until) {
    if (mac && received.size() == before_mac) {
      REQUIRE(::send(fd, mac->data(), mac->size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(mac->size()));
      mac.reset();
    }
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 100) <= 0) continue;
    std::array<std::byte, 256> chunk{};
    const ssize_t n = ::recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) break;  // closed (a reset counts as closed too)
    received.insert(received.end(), chunk.begin(), chunk.begin() + n);
  }
  ::close(fd);
  return received;
}

std::vector<std::byte> status_bytes(
    std::initializer_list<strata::transport::tcp::HandshakeStatus> list) {
  std::vector<std::byte> out;
  for (auto status : list)
    out.push_back(static_cast<std::byte>(status));
  return out;
}

TEST_CASE("a probe of a rank's port learns nothing it did not send") {
  // Rank 1 probes rank 0's port as a stranger would before joining: each probe gets one status
  // byte (or, with a token, a challenge of fresh random bytes) and the connection closes; no
  // probe sees rank 0's Hello, so none learns the cluster's fingerprint or tunables.
  using strata::transport::tcp::HandshakeStatus;
  using strata::transport::tcp::Hello;
  using strata::transport::tcp::kNonceBytes;
  constexpr std::uint64_t kFingerprint = 0x5eed0fc1a55e7001ULL;
  for (const bool with_token : {false, true}) {
    CAPTURE(with_token);
    Ports ports(2);
    TcpOptions tcp;
    if (with_token) tcp.cluster_token = "s3cret";
    Hello stranger;
    stranger.rank = 1;
    stranger.world_size = 2;
    stranger.cluster = 0x1234;  // not the cluster's
    stranger.incarnation = 42;
    stranger.flags = with_token ? Hello::kHasToken : 0;
    std::vector<std::vector<std::byte>> answers;
    auto errors = run_ranks(2, [&](int r) {
      auto membership = ports.membership(r);
      membership.cluster_fingerprint = kFingerprint;
      if (r == 1) {
        const std::uint16_t port = ports.addresses[0].port;
        Hello old_version = stranger;
        old_version.version = 3;
        answers.push_back(probe(port, old_version));
        if (!with_token) {
          answers.push_back(probe(port, stranger));
          Hello other_size = stranger;
          other_size.cluster = kFingerprint;  // a stranger who guessed the fingerprint right
          other_size.world_size = 3;
          answers.push_back(probe(port, other_size));
        } else {
          Hello no_token = stranger;
          no_token.flags = 0;
          answers.push_back(probe(port, no_token));
          // Claims a token, answers the challenge with a guess.
          answers.push_back(probe(port, stranger, strata::transport::tcp::Mac{}, 1 + kNonceBytes));
          answers.push_back(probe(port, stranger, strata::transport::tcp::Mac{}, 1 + kNonceBytes));
        }
      }
      TcpCommunicator comm(std::move(membership), tcp, deadline(15s));
      std::vector<int> data{r + 1};
      comm.all_reduce(std::span(data), strata::ReduceOp::sum);
      CHECK(data[0] == 3);
    });
    CHECK_MESSAGE(!errors[0], message_of(errors[0]));
    CHECK_MESSAGE(!errors[1], message_of(errors[1]));
    REQUIRE(answers.size() == (with_token ? 4U : 3U));
    CHECK(answers[0] == status_bytes({HandshakeStatus::bad_version}));
    if (!with_token) {
      CHECK(answers[1] == status_bytes({HandshakeStatus::other_cluster}));
      CHECK(answers[2] == status_bytes({HandshakeStatus::world_size_differs}));
    } else {
      CHECK(answers[1] == status_bytes({HandshakeStatus::token_required}));
      for (std::size_t k : {2U, 3U}) {
        CAPTURE(k);
        REQUIRE(answers[k].size() == 1 + kNonceBytes + 1);
        CHECK(answers[k].front() == static_cast<std::byte>(HandshakeStatus::challenge));
        CHECK(answers[k].back() == static_cast<std::byte>(HandshakeStatus::authentication_failed));
      }
      // The challenges are fresh: a recorded answer to one cannot answer the next.
      CHECK(!std::equal(answers[2].begin() + 1, answers[2].begin() + 1 + kNonceBytes,
                        answers[3].begin() + 1));
    }
  }
}

TEST_CASE("a prober who knows the token but not the cluster is refused after the challenge") {
  using strata::transport::tcp::HandshakeStatus;
  using strata::transport::tcp::Hello;
  using strata::transport::tcp::kNonceBytes;
  Ports ports(2);
  TcpOptions tcp;
  tcp.cluster_token = "s3cret";
  // Answers the challenge correctly (it knows the token) for a Hello of another cluster, and
  // replays that answer on a second connection, whose challenge differs.
  Hello insider;
  insider.rank = 1;
  insider.world_size = 2;
  insider.cluster = 0x1234;
  insider.incarnation = 7;
  insider.flags = Hello::kHasToken;
  std::vector<std::vector<std::byte>> answers;
  auto errors = run_ranks(2, [&](int r) {
    if (r == 1) {
      const std::uint16_t port = ports.addresses[0].port;
      const int fd = connect_loopback(port);
      const auto hello = strata::transport::tcp::encode(insider);
      REQUIRE(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(hello.size()));
      std::array<std::byte, 1 + kNonceBytes> challenge{};
      std::size_t got = 0;
      while (got < challenge.size()) {
        const ssize_t n = ::recv(fd, challenge.data() + got, challenge.size() - got, 0);
        REQUIRE(n > 0);
        got += static_cast<std::size_t>(n);
      }
      REQUIRE(challenge[0] == static_cast<std::byte>(HandshakeStatus::challenge));
      const auto mac = strata::transport::tcp::handshake_mac("s3cret", "strata-connect", hello,
                                                             std::span(challenge).subspan(1));
      REQUIRE(::send(fd, mac.data(), mac.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(mac.size()));
      std::vector<std::byte> rest;
      std::array<std::byte, 256> chunk{};
      for (ssize_t n; (n = ::recv(fd, chunk.data(), chunk.size(), 0)) > 0;)
        rest.insert(rest.end(), chunk.begin(), chunk.begin() + n);
      ::close(fd);
      answers.push_back(rest);
      answers.push_back(probe(port, insider, mac, 1 + kNonceBytes));  // the replay
    }
    TcpCommunicator comm(ports.membership(r), tcp, deadline(15s));
    std::vector<int> data{r + 1};
    comm.all_reduce(std::span(data), strata::ReduceOp::sum);
    CHECK(data[0] == 3);
  });
  CHECK_MESSAGE(!errors[0], message_of(errors[0]));
  CHECK_MESSAGE(!errors[1], message_of(errors[1]));
  REQUIRE(answers.size() == 2);
  CHECK(answers[0] == status_bytes({HandshakeStatus::other_cluster}));
  REQUIRE(answers[1].size() == 1 + kNonceBytes + 1);
  CHECK(answers[1].back() == static_cast<std::byte>(HandshakeStatus::authentication_failed));
}

TEST_CASE("hostile bytes on a rank's port are dropped and the group still forms") {
  Ports ports(2);
  std::mt19937 random(12345);
  auto errors = run_ranks(2, [&](int r) {
    if (r == 1) {
      // Before rank 1 joins, strangers talk to rank 0's port: random bytes, a truncated
      // handshake, a huge burst, and a silent connection.
      asio::io_context io;
      const asio::ip::tcp::endpoint rank0(asio::ip::make_address_v4("127.0.0.1"),
                                          ports.addresses[0].port);
      std::vector<asio::ip::tcp::socket> strangers;
      for (int k = 0; k < 4; ++k) {
        asio::ip::tcp::socket socket(io);
        for (int attempt = 0; attempt < 100; ++attempt) {
          std::error_code ec;
          socket.connect(rank0, ec);
          if (!ec) break;
          std::this_thread::sleep_for(10ms);
        }
        std::vector<std::uint8_t> bytes(k == 2 ? (1 << 20) : 100);
        for (auto& b : bytes)
          b = static_cast<std::uint8_t>(random());
        if (k == 1) {  // a valid magic, then nothing more: a truncated handshake
          bytes = {0x53, 0x54, 0x52, 0x48, 1, 0};
        }
        std::error_code ec;
        if (k != 3) asio::write(socket, asio::buffer(bytes), ec);
        strangers.push_back(std::move(socket));
      }
      std::this_thread::sleep_for(200ms);
    }
    TcpCommunicator comm(ports.membership(r), {}, deadline(15s));
    std::vector<double> data{1.5 * (r + 1)};
    comm.all_reduce(std::span(data), strata::ReduceOp::sum);
    CHECK(data[0] == 4.5);
  });
  CHECK_FALSE(errors[0]);
  CHECK_FALSE(errors[1]);
}

TEST_CASE("the listening socket binds the task's address only, and closes once the group forms") {
  const auto ports = free_ports(2);
  const std::string first = fmt::format("127.0.0.1:{}", ports[0]);
  const std::string second = fmt::format("127.0.0.1:{}", ports[1]);
  auto membership = membership_from_tf_config(first, second, 0);
  REQUIRE(membership.listen_fd == -1);  // the communicator binds the socket itself
  std::optional<TcpCommunicator> rank0;
  std::optional<TcpCommunicator> rank1;
  std::exception_ptr error0;
  std::exception_ptr error1;
  {
    std::jthread joining0([&] {
      try {
        rank0.emplace(std::move(membership), TcpOptions{}, deadline(30s));
      } catch (...) {
        error0 = std::current_exception();
      }
    });
    // Rank 0 listens while it waits for rank 1, which has not started yet.
    std::vector<std::string> bound;
    for (int attempt = 0; attempt < 2000 && bound.empty(); ++attempt) {
      bound = listening_addresses(ports[0]);
      if (bound.empty()) std::this_thread::sleep_for(5ms);
    }
    CHECK(bound == std::vector<std::string>{"127.0.0.1"});
    // Linux delivers all of 127.0.0.0/8 to lo: a socket bound to every interface would answer.
    CHECK(connect_errno("127.0.0.2", ports[0]) == ECONNREFUSED);
    std::jthread joining1([&] {
      try {
        rank1.emplace(membership_from_tf_config(first, second, 1), TcpOptions{}, deadline(30s));
      } catch (...) {
        error1 = std::current_exception();
      }
    });
  }
  REQUIRE_MESSAGE(!error0, message_of(error0));
  REQUIRE_MESSAGE(!error1, message_of(error1));
  // The group is formed: nothing can join it any more.
  CHECK(listening_addresses(ports[0]).empty());
  CHECK(listening_addresses(ports[1]).empty());
}

// The last rank and a one-rank group accept nobody, yet must close the socket they were
// handed: else strangers' connections queue there, and each group leaks a descriptor.
TEST_CASE("no rank's listening socket outlives the forming of its group") {
  // TcpCommunicator::create and the launchers' resolvers hand every rank a bound socket, the
  // last rank's included, though the last rank accepts nobody.
  for (int size : {1, 2, 3}) {
    CAPTURE(size);
    Ports ports(size);
    std::vector<std::optional<TcpCommunicator>> group(static_cast<std::size_t>(size));
    auto errors = run_ranks(size, [&](int r) {
      group[static_cast<std::size_t>(r)].emplace(ports.membership(r), TcpOptions{}, deadline(10s));
    });
    for (int r = 0; r < size; ++r) {
      CAPTURE(r);
      REQUIRE_MESSAGE(!errors[static_cast<std::size_t>(r)],
                      message_of(errors[static_cast<std::size_t>(r)]));
      CHECK_MESSAGE(listening_addresses(ports.addresses[static_cast<std::size_t>(r)].port).empty(),
                    "rank ", r, " still listens on its port while the group is formed");
    }
  }
}

namespace {

// True when this kernel lets a process bind addresses it does not have: then no address is
// foreign, and the tests that need one say so and stop.
bool any_address_binds() {
  std::string nonlocal_bind;
  std::ifstream("/proc/sys/net/ipv4/ip_nonlocal_bind") >> nonlocal_bind;
  if (nonlocal_bind != "1") return false;
  MESSAGE("skipped: net.ipv4.ip_nonlocal_bind=1 lets any address be bound");
  return true;
}

// The error of joining as worker `index` of a two-worker cluster in which that worker's
// address is 192.0.2.1 (TEST-NET-1, RFC 5737: no machine has it); "no error" if none.
std::string foreign_address_error(int index, std::string& foreign) {
  const auto ports = free_ports(2);
  foreign = fmt::format("192.0.2.1:{}", ports[0]);
  const std::string local = fmt::format("127.0.0.1:{}", ports[1]);
  try {
    TcpCommunicator comm(membership_from_tf_config(index == 0 ? foreign : local,
                                                   index == 0 ? local : foreign, index),
                         {}, deadline(2s));
  } catch (const strata::ConfigurationError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return fmt::format("not a ConfigurationError: {}", e.what());
  }
  return "no error";
}

}  // namespace

TEST_CASE("a task address that is not this machine's is a configuration error naming it") {
  if (any_address_binds()) return;
  std::string foreign;
  const std::string error = foreign_address_error(0, foreign);
  CAPTURE(error);
  CHECK(error.find("rank 0") != std::string::npos);
  CHECK(error.find(foreign) != std::string::npos);
  // Not the generic "cannot listen on ..." (asio maps EADDRNOTAVAIL to no std::errc).
  CHECK(error.find("not an address of this machine") != std::string::npos);
}

// The last rank accepts nobody but binds its address all the same: else a wrong one would go
// unnoticed, and the rank would time out blaming rank 0 ("rank 0 did not join ...").
TEST_CASE("the last rank's foreign address is a configuration error too") {
  if (any_address_binds()) return;
  std::string foreign;
  const std::string error = foreign_address_error(1, foreign);
  CAPTURE(error);
  CHECK(error.find("not a ConfigurationError") == std::string::npos);
  CHECK(error.find(foreign) != std::string::npos);
}

TEST_CASE("the cluster token from STRATA_CLUSTER_TOKEN never crosses the wire") {
  // Two ranks form a group and all-reduce through a wiretap: rank 1 reaches rank 0 only via
  // the relay (its address list names the relay's port; the explicit fingerprint makes both
  // ranks one cluster all the same).
  constexpr std::string_view kToken = "strata-test-secret-6b1f0e2c9d4a7358e1f0";
  ScopedEnvironment token("STRATA_CLUSTER_TOKEN", std::string(kToken).c_str());
  Ports ports(2);
  Wiretap wiretap(ports.addresses[0].port);
  std::vector<float> sums(2, 0.0F);
  auto errors = run_ranks(2, [&](int r) {
    auto membership = ports.membership(r);
    membership.cluster_fingerprint = 0x7a9;
    if (r == 1) membership.addresses[0].port = wiretap.port();
    TcpCommunicator comm(std::move(membership), TcpOptions{}, deadline(10s));
    std::vector<float> data(1000, static_cast<float>(r + 1));
    comm.all_reduce(std::span(data), strata::ReduceOp::sum);
    sums[static_cast<std::size_t>(r)] = data[999];
  });
  wiretap.stop();
  CHECK_MESSAGE(!errors[0], message_of(errors[0]));
  CHECK_MESSAGE(!errors[1], message_of(errors[1]));
  CHECK(sums == std::vector<float>{3.0F, 3.0F});
  // Control and data connection at least; each opens with rank 1's Hello, which says it holds
  // a token: the token from the environment was in use.
  const auto& streams = wiretap.streams();
  REQUIRE(streams.size() >= 4);
  std::size_t index = 0;
  for (const std::string& stream : streams) {
    CAPTURE(index);
    if (index++ % 2 == 0) {
      REQUIRE(stream.size() >= strata::transport::tcp::kHelloBytes);
      strata::transport::tcp::Hello hello;
      std::array<std::byte, strata::transport::tcp::kHelloBytes> bytes{};
      std::memcpy(bytes.data(), stream.data(), bytes.size());
      REQUIRE(strata::transport::tcp::decode(bytes, hello));
      CHECK(hello.rank == 1);
      CHECK((hello.flags & strata::transport::tcp::Hello::kHasToken) != 0);
    }
    // Neither the token nor any 8-byte piece of it.
    for (std::size_t at = 0; at + 8 <= kToken.size(); ++at)
      CHECK_MESSAGE(stream.find(kToken.substr(at, 8)) == std::string::npos, "the token's bytes ",
                    at, "..", at + 7, " were sent");
  }
}
