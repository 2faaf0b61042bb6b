// Tests for the failure semantics of strata/communicator/tcp.hpp, with every rank a thread of
// this process on loopback: mismatched calls raise MismatchError on every rank, a stalled rank
// makes the others time out naming it, abort() releases every rank, a failed group refuses
// later calls; rendezvous names missing ranks, ports in use and wrong cluster tokens, and
// survives hostile bytes on its port. Failures of real processes (SIGKILL, SIGSTOP) are in
// tcp_process_test.cpp.
#include <strata/communicator/tcp.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

namespace {

using namespace std::chrono_literals;
using strata::communicator::CallOptions;
using strata::communicator::CommunicatorOptions;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpMembership;
using strata::communicator::TcpOptions;
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

std::string message_of(const std::exception_ptr& error) {
  if (!error) return "no error";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
}

template <class E>
bool is(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Listening sockets on 127.0.0.1 with kernel-chosen ports, for groups built by hand.
struct Ports {
  explicit Ports(int n) {
    for (int r = 0; r < n; ++r) {
      asio::ip::tcp::acceptor acceptor(
          io, asio::ip::tcp::endpoint(asio::ip::make_address_v4("127.0.0.1"), 0));
      addresses.push_back({"127.0.0.1", acceptor.local_endpoint().port()});
      fds.push_back(acceptor.release());
    }
  }
  TcpMembership membership(int rank) const {
    return {rank, addresses, 0, fds[static_cast<std::size_t>(rank)]};
  }
  asio::io_context io;
  std::vector<Address> addresses;
  std::vector<int> fds;
};

CommunicatorOptions deadline(std::chrono::milliseconds timeout) {
  CommunicatorOptions options;
  options.timeout = timeout;
  return options;
}

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
  for (const auto& test : cases) {
    CAPTURE(test.name);
    auto group = TcpCommunicator::create(3, deadline(10s));
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
      CHECK_MESSAGE(is<strata::MismatchError>(error), message_of(error));
      const std::string message = message_of(error);
      if (message.find("but rank") != std::string::npos ||
          message.find("while this rank is in") != std::string::npos)
        named_both_views = true;
    }
    CHECK(named_both_views);
    // The group is failed: later calls refuse at once, on every rank.
    auto later = run_ranks(3, [&](int r) { group[static_cast<std::size_t>(r)].barrier(); });
    for (const auto& error : later) {
      CHECK(is<strata::MismatchError>(error));
      CHECK(message_of(error).find("failed earlier") != std::string::npos);
    }
  }
}

TEST_CASE("a rank that never calls makes the others time out naming it") {
  auto group = TcpCommunicator::create(3, deadline(10s));
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
    CHECK_MESSAGE(is<strata::TimeoutError>(error), message_of(error));
    CHECK_MESSAGE(message_of(error).find("2 did not answer") != std::string::npos,
                  message_of(error));
  }
  CHECK_FALSE(errors[2]);
}

TEST_CASE("abort() from another thread releases every rank with the reason") {
  auto group = TcpCommunicator::create(3, deadline(20s));
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
    CHECK_MESSAGE(is<strata::PeerFailureError>(error), message_of(error));
    CHECK(message_of(error).find("the watchdog gave up") != std::string::npos);
  }
}

TEST_CASE("a usage error on one rank fails the group for the others at once") {
  auto group = TcpCommunicator::create(2, deadline(10s));
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, [&](int r) {
    std::vector<float> send(10, 1.0F);
    std::vector<float> recv(r == 1 ? 9 : 10);  // rank 1's output is too short
    group[static_cast<std::size_t>(r)].all_reduce(std::span<const float>(send), std::span(recv),
                                                  strata::ReduceOp::sum);
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_MESSAGE(is<strata::UsageError>(errors[1]), message_of(errors[1]));
  CHECK_MESSAGE(is<strata::PeerFailureError>(errors[0]), message_of(errors[0]));
  CHECK(message_of(errors[0]).find("recv has 9 elements") != std::string::npos);
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
    CHECK(is<strata::TimeoutError>(errors[static_cast<std::size_t>(r)]));
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
    CHECK(is<strata::ConfigurationError>(errors[1]));
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
    CHECK(is<strata::ConfigurationError>(errors[1]));
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
  CHECK(is<strata::ConfigurationError>(errors[1]));
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
  CHECK_MESSAGE(is<strata::ConfigurationError>(errors[1]), message_of(errors[1]));
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
  CHECK_MESSAGE(is<strata::ConfigurationError>(errors[1]), message_of(errors[1]));
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
  CHECK_MESSAGE(is<strata::TimeoutError>(errors[1]), message_of(errors[1]));  // A
  REQUIRE(errors[2]);                                                         // B
  // B keeps retrying (A may be about to die) until its deadline, then says who refused it.
  CHECK_MESSAGE(is<strata::TimeoutError>(errors[2]), message_of(errors[2]));
  CHECK(message_of(errors[2]).find("another incarnation of this rank is already connected") !=
        std::string::npos);
  for (int who : {0, 3, 4}) {
    CAPTURE(who);
    CHECK_MESSAGE(!errors[static_cast<std::size_t>(who)],
                  message_of(errors[static_cast<std::size_t>(who)]));
  }
  CHECK(sums == std::vector<float>{6.0F, 6.0F, 6.0F});
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
