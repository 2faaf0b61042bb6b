// Tests for strata/communicator/tcp.hpp: group formation on loopback and the conformance of
// every collective against the one collective reference (tools/reference/), for world
// sizes 1 to 8 (each rank a thread with its own TCP connections); which algorithm `automatic`
// runs; the socket options the tunables ask for; a rank that lent its buffer returns only once
// its peer has read it.
//
// Sweep: every element type × world sizes 1..8 × in and out of place × every ReduceOp (for
// reducing collectives) × roots, at counts {0, 1, 7, 1023}, with every all-reduce algorithm
// (automatic, ring, recursive doubling), and again with 64-byte messages over two connections
// per peer, so that buffers are cut into many segments (the other collectives at sizes 5..8
// with the 64-byte tuning only); sizes 5..7 fold ranks in and out of recursive doubling. At 2^20+3
// and 16 Mi elements every (collective, op, type) once, world sizes rotating over 1..4, and
// again with every message of 64 KiB or more lent (vmsplice/splice) rather than copied. 16-bit
// floats may round at every ring step, which the reference's tolerances allow. Failures, mismatches
// and rendezvous errors are in tcp_failure_test.cpp; runs across processes in tcp_process_test.cpp.
#include <strata/communicator/tcp.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/communicator/communicator.hpp>

#include <collective_reference/elements.hpp>
#include <collective_reference/inputs.hpp>

#include "conformance_runner.hpp"
#include "loopback_ports.hpp"
#include "sweep_plan.hpp"
#include "sweep_report.hpp"

namespace {

using strata::communicator::Collective;
using strata::communicator::CommunicatorOptions;
using strata::communicator::TcpAllReduce;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpMembership;
using strata::communicator::TcpOptions;
namespace testing = strata::testing;
namespace reference = strata::reference;

// A group of TcpCommunicators with fixed TCP options, named for messages.
struct Tuning {
  std::string name;
  TcpOptions tcp;
};

// The threads of one process share a host: these groups keep every byte on TCP, to test its
// algorithms (the shared-memory path is tcp_shared_memory_test.cpp's).
Tuning tuned(std::string name, TcpAllReduce algorithm, std::size_t chunk, int connections) {
  TcpOptions tcp;
  tcp.shared_memory = false;
  tcp.all_reduce = algorithm;
  tcp.chunk_bytes = chunk;
  tcp.connections_per_peer = connections;
  return {std::move(name), tcp};
}

const Tuning kDefault = tuned("tcp", TcpAllReduce::automatic, std::size_t{1} << 20, 1);
const Tuning kRing = tuned("tcp<ring>", TcpAllReduce::ring, std::size_t{1} << 20, 1);
const Tuning kRecursiveDoubling =
    tuned("tcp<rd>", TcpAllReduce::recursive_doubling, std::size_t{1} << 20, 1);
const Tuning kHalvingDoubling =
    tuned("tcp<hd>", TcpAllReduce::halving_doubling, std::size_t{1} << 20, 1);
// 64-byte messages over two connections per peer: a 1023-element float vector becomes dozens
// of segments, exercising pipelining, receive slots and the order of channels.
const Tuning kSegmented = tuned("tcp<64 B x2>", TcpAllReduce::automatic, 64, 2);
const Tuning kSegmentedRing = tuned("tcp<ring, 64 B x2>", TcpAllReduce::ring, 64, 2);
const Tuning kSegmentedRecursiveDoubling =
    tuned("tcp<rd, 64 B x2>", TcpAllReduce::recursive_doubling, 64, 2);
const Tuning kSegmentedHalvingDoubling =
    tuned("tcp<hd, 64 B x2>", TcpAllReduce::halving_doubling, 64, 2);

// `tuning` with every message of 64 KiB or more lent, whatever the size of the call.
Tuning lending(Tuning tuning) {
  const std::string& name = tuning.name;
  tuning.name = name.back() == '>' ? name.substr(0, name.size() - 1) + ", lent>" : name + "<lent>";
  tuning.tcp.lend_from_bytes = 0;
  return tuning;
}

testing::ConformanceRunner<TcpCommunicator> runner_for(const Tuning& tuning) {
  return testing::ConformanceRunner<TcpCommunicator>(
      tuning.name, {}, [tcp = tuning.tcp](int size, const CommunicatorOptions& options) {
        return TcpCommunicator::create(size, options, tcp);
      });
}

std::vector<testing::CaseSpec> sizes_between(int smallest, int largest,
                                             std::vector<testing::CaseSpec> cases) {
  std::erase_if(cases,
                [&](const testing::CaseSpec& c) { return c.size < smallest || c.size > largest; });
  return cases;
}

using strata::testing::report;

void sweep_small(const Tuning& tuning, Collective kind, int smallest, int largest) {
  auto runner = runner_for(tuning);
  report(testing::run_cases(runner, testing::thinned_when_quick(sizes_between(
                                        smallest, largest, testing::small_count_cases(kind)))));
}

// Rank `rank`'s input at `index` for telling summation orders apart: magnitudes spread over
// 2^-20..2^20, so partial sums round and the order of additions shows in the result. (The
// conformance inputs, all in [-1, 1) on a 2^-23 grid, add exactly in float whatever the order
// on three ranks.)
template <class T>
T spread_value(int rank, std::size_t index) {
  const std::uint64_t h =
      reference::mix64(index * 0x9e3779b97f4a7c15ULL + (static_cast<std::uint64_t>(rank) << 48));
  constexpr int kBits = std::numeric_limits<T>::digits;  // a full significand
  const T unit = static_cast<T>(h >> (64 - kBits)) * std::ldexp(T{1}, -kBits) - T{0.5};
  return std::ldexp(unit, static_cast<int>(reference::mix64(h) % 41) - 20);
}

// Every rank's all_reduce(sum) of spread_value<T>(rank, ·) at each of `counts`, on one group of
// `size` ranks with `tcp`; element c is rank 0's result at counts[c] as bits (every rank's
// result is checked to be the same).
template <class T>
std::vector<std::vector<reference::Bits<T>>> sums_of(int size, const TcpOptions& tcp,
                                                     const std::vector<std::size_t>& counts) {
  auto group = TcpCommunicator::create(size, {}, tcp);
  const auto un = static_cast<std::size_t>(size);
  std::vector<std::vector<std::vector<reference::Bits<T>>>> results(un);
  std::vector<std::exception_ptr> errors(un);
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        const auto ur = static_cast<std::size_t>(r);
        try {
          for (std::size_t count : counts) {
            std::vector<T> data(count);
            for (std::size_t i = 0; i < count; ++i)
              data[i] = spread_value<T>(r, i);
            group[ur].all_reduce(std::span(data), strata::ReduceOp::sum);
            auto& bits = results[ur].emplace_back();
            for (T x : data)
              bits.push_back(reference::bits_of(x));
          }
        } catch (...) {
          errors[ur] = std::current_exception();
        }
      });
  }
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  for (std::size_t r = 1; r < un; ++r)
    REQUIRE(results[r] == results[0]);
  return results[0];
}

using Ports = strata::testing::LoopbackPorts;

// Forms the group of `ports` with `tcp`, one thread per rank.
std::vector<TcpCommunicator> form_group(const Ports& ports, const TcpOptions& tcp) {
  const auto n = ports.addresses.size();
  std::vector<std::optional<TcpCommunicator>> slots(n);
  std::vector<std::exception_ptr> errors(n);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          slots[r].emplace(TcpMembership{static_cast<int>(r), ports.addresses, 0, ports.fds[r]},
                           tcp);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  }
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  std::vector<TcpCommunicator> group;
  for (auto& slot : slots)
    group.push_back(std::move(*slot));
  return group;
}

// The file descriptors of this process's connected TCP sockets that have one of `addresses`'
// ports at either end: both ends of every connection of a group built on them. The
// communicator does not expose its sockets, so they are found the way `ss -p` would.
std::vector<int> connections_on(const std::vector<strata::cluster::Address>& addresses) {
  auto ours = [&](const sockaddr_in& endpoint) {
    return std::any_of(addresses.begin(), addresses.end(), [&](const auto& address) {
      return ntohs(endpoint.sin_port) == address.port;
    });
  };
  std::vector<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(entry.path().filename().string());
    struct stat status {};
    if (::fstat(fd, &status) != 0 || !S_ISSOCK(status.st_mode)) continue;
    sockaddr_in local{};
    sockaddr_in peer{};
    socklen_t local_size = sizeof local;
    socklen_t peer_size = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        local.sin_family != AF_INET)
      continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) continue;
    if (ours(local) || ours(peer)) fds.push_back(fd);
  }
  std::sort(fds.begin(), fds.end());
  return fds;
}

std::string congestion_of(int fd) {
  char name[32] = {};
  socklen_t size = sizeof name;
  REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &size) == 0);
  return std::string(name);
}

int int_option(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof value;
  REQUIRE(::getsockopt(fd, level, name, &value, &size) == 0);
  return value;
}

// What getsockopt reports after setsockopt(`name`, bytes) on Linux: the request capped at the
// sysctl maximum, then doubled for the kernel's bookkeeping overhead.
int reported_buffer_bytes(int bytes, const char* sysctl_max) {
  long maximum = 0;
  std::ifstream(sysctl_max) >> maximum;
  REQUIRE(maximum > 0);
  return 2 * static_cast<int>(std::min<long>(bytes, maximum));
}

}  // namespace

TEST_CASE("a loopback group forms and every rank knows its rank and size") {
  static_assert(strata::communicator::Communicator<TcpCommunicator>);
  auto group = TcpCommunicator::create(3);
  REQUIRE(group.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(group[static_cast<std::size_t>(r)].rank() == r);
    CHECK(group[static_cast<std::size_t>(r)].size() == 3);
  }
  CHECK(TcpCommunicator::kName == "tcp");
}

TEST_CASE("all_reduce matches the reference at small counts, world sizes 1-4") {
  for (const Tuning* tuning :
       {&kDefault, &kRing, &kRecursiveDoubling, &kHalvingDoubling, &kSegmented, &kSegmentedRing,
        &kSegmentedRecursiveDoubling, &kSegmentedHalvingDoubling}) {
    CAPTURE(tuning->name);
    sweep_small(*tuning, Collective::all_reduce, 1, 4);
  }
}

TEST_CASE(
    "broadcast, reduce, all_gather and reduce_scatter match the reference at "
    "small counts, world sizes 1-4") {
  for (const Tuning* tuning : {&kDefault, &kSegmented}) {
    CAPTURE(tuning->name);
    for (Collective kind : {Collective::broadcast, Collective::reduce, Collective::all_gather,
                            Collective::reduce_scatter}) {
      CAPTURE(kind);
      sweep_small(*tuning, kind, 1, 4);
    }
  }
}

TEST_CASE("collectives match the reference at 2^20+3 and 16 Mi elements") {
  auto runner = runner_for(kDefault);
  for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce,
                          Collective::all_gather, Collective::reduce_scatter}) {
    CAPTURE(kind);
    report(testing::run_cases(
        runner,
        sizes_between(1, 4, testing::large_count_cases(kind, testing::sweep_from_environment()))));
  }
}

TEST_CASE("halving-doubling all_reduce matches the reference at 2^20+3 and 16 Mi elements") {
  // 16 Mi floats on 4 ranks: blocks of 4 Mi elements, each cut into 16 pieces of 1 MiB.
  auto runner = runner_for(kHalvingDoubling);
  report(testing::run_cases(
      runner, sizes_between(1, 4,
                            testing::large_count_cases(Collective::all_reduce,
                                                       testing::sweep_from_environment()))));
}

TEST_CASE("lent messages: collectives match the reference at 2^20+3 and 16 Mi elements") {
  // In place, the ring's all-gather writes where its reduce-scatter lent from: the peer must
  // have read it by then. Recursive and halving-doubling copy the sends a receive waits for.
  for (const Tuning& tuning :
       {lending(kDefault), lending(kRecursiveDoubling), lending(kHalvingDoubling)}) {
    CAPTURE(tuning.name);
    auto runner = runner_for(tuning);
    const bool every_kind = tuning.tcp.all_reduce == TcpAllReduce::automatic;
    for (Collective kind : {Collective::all_reduce, Collective::broadcast, Collective::reduce,
                            Collective::all_gather, Collective::reduce_scatter}) {
      if (!every_kind && kind != Collective::all_reduce) continue;
      CAPTURE(kind);
      report(testing::run_cases(
          runner,
          sizes_between(1, 4,
                        testing::large_count_cases(kind, testing::sweep_from_environment(), 1))));
    }
  }
}

TEST_CASE("a rank that lent its buffer returns only once the peer has read it") {
  // Rank 1 starts its broadcast late; rank 0 overwrites its buffer the moment its broadcast
  // returns. Had rank 0 returned before rank 1 read the pages it lent (all but the last
  // kLendWindowBytes can be in rank 1's socket by then), rank 1 would receive the overwrite.
  TcpOptions tcp;
  tcp.lend_from_bytes = 0;
  tcp.shared_memory = false;
  auto group = TcpCommunicator::create(2, {}, tcp);
  constexpr std::size_t kCount = std::size_t{2} << 20;  // 8 MiB of floats: 8 lent messages
  auto pattern = [](std::size_t i) { return static_cast<float>(i % 1000) + 0.5F; };
  std::vector<float> sent(kCount);
  for (std::size_t i = 0; i < kCount; ++i)
    sent[i] = pattern(i);
  std::vector<float> received(kCount, -1.0F);
  {
    std::jthread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      group[1].broadcast(std::span(received), 0);
    });
    group[0].broadcast(std::span(sent), 0);
    std::fill(sent.begin(), sent.end(), -7.0F);
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    wrong += received[i] != pattern(i) ? 1 : 0;
  CHECK(wrong == 0);
  // And again, the other way round, on the same connections (a release of an earlier call
  // must not count for a later one).
  for (std::size_t i = 0; i < kCount; ++i)
    received[i] = pattern(i + 1);
  {
    std::jthread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      group[0].broadcast(std::span(sent), 1);
    });
    group[1].broadcast(std::span(received), 1);
    std::fill(received.begin(), received.end(), -7.0F);
  }
  wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i)
    wrong += sent[i] != pattern(i + 1) ? 1 : 0;
  CHECK(wrong == 0);
}

TEST_CASE("barrier returns on every rank of groups of 1 to 5") {
  for (int size = 1; size <= 5; ++size) {
    CAPTURE(size);
    auto group = TcpCommunicator::create(size);
    std::atomic<int> done{0};
    {
      std::vector<std::jthread> threads;
      for (int r = 1; r < size; ++r)
        threads.emplace_back([&, r] {
          for (int i = 0; i < 10; ++i)
            group[static_cast<std::size_t>(r)].barrier();
          ++done;
        });
      for (int i = 0; i < 10; ++i)
        group[0].barrier();
    }
    CHECK(done == size - 1);
  }
}

TEST_CASE("all_reduce matches the reference at small counts, world sizes 5-8") {
  // Non-powers of two fold 1 to 3 ranks into recursive doubling and back out; 8 folds none.
  for (const Tuning* tuning :
       {&kDefault, &kRing, &kRecursiveDoubling, &kHalvingDoubling, &kSegmented, &kSegmentedRing,
        &kSegmentedRecursiveDoubling, &kSegmentedHalvingDoubling}) {
    CAPTURE(tuning->name);
    sweep_small(*tuning, Collective::all_reduce, 5, 8);
  }
}

TEST_CASE(
    "broadcast, reduce, all_gather and reduce_scatter match the reference at "
    "small counts, world sizes 5-8") {
  // Segmented only, to keep the run short: it cuts buffers into the most messages, and the
  // default tuning runs the same algorithms (these collectives have no choice of algorithm).
  for (Collective kind : {Collective::broadcast, Collective::reduce, Collective::all_gather,
                          Collective::reduce_scatter}) {
    CAPTURE(kind);
    sweep_small(kSegmented, kind, 5, 8);
  }
}

TEST_CASE(
    "automatic all_reduce runs recursive doubling while S times ceil(log2 n) times (n - 1) is "
    "at most small_message_bytes, the ring above") {
  // Which algorithm ran shows in the bits: the ring and recursive doubling add the ranks'
  // floats in different orders, so automatic's result must equal, bit for bit, that of the
  // algorithm it should have picked. Each count is checked to tell the two apart first.
  struct Side {
    std::size_t count;
    bool recursive_doubling;  // what automatic must run at this count
  };
  struct Case {
    int size;
    std::optional<std::size_t> threshold;  // unset: TcpOptions' default
    std::vector<Side> floats;
    std::vector<Side> doubles;
  };
  // The threshold is in bytes, not elements: double crosses it at half float's count. 3 ranks
  // weigh S by 2 rounds times 2, 4 ranks by 2 times 3, 5 ranks by 3 times 4: 512 KiB / 12 =
  // 43690 bytes, 10922 floats or 5461 doubles. 1000 / 4 = 250, 1500 / 6 = 250 and
  // 3000 / 12 = 250 bytes are no multiple of either element size.
  const std::vector<Case> cases = {
      {3, std::nullopt, {{32768, true}, {32769, false}}, {{16384, true}, {16385, false}}},
      {5, std::nullopt, {{10922, true}, {10923, false}}, {{5461, true}, {5462, false}}},
      {3, 1000, {{62, true}, {63, false}, {1000, false}}, {{31, true}, {32, false}}},
      {4, 1500, {{62, true}, {63, false}}, {{31, true}, {32, false}}},
      {5, 3000, {{62, true}, {63, false}}, {{31, true}, {32, false}}},
  };
  CHECK(TcpOptions{}.small_message_bytes == 512 * 1024);  // the default cases' counts assume it
  for (const Case& test : cases) {
    CAPTURE(test.size);
    CAPTURE(test.threshold.value_or(0));
    auto results_of = [&]<class T>(std::type_identity<T>, const std::vector<Side>& sides) {
      std::vector<std::size_t> counts;
      for (const Side& side : sides)
        counts.push_back(side.count);
      auto options = [&](TcpAllReduce algorithm) {
        TcpOptions tcp;
        tcp.shared_memory = false;
        tcp.all_reduce = algorithm;
        if (test.threshold) tcp.small_message_bytes = *test.threshold;
        return tcp;
      };
      const auto automatic = sums_of<T>(test.size, options(TcpAllReduce::automatic), counts);
      const auto ring = sums_of<T>(test.size, options(TcpAllReduce::ring), counts);
      const auto doubling =
          sums_of<T>(test.size, options(TcpAllReduce::recursive_doubling), counts);
      for (std::size_t c = 0; c < sides.size(); ++c) {
        CAPTURE(sides[c].count);
        REQUIRE_MESSAGE(ring[c] != doubling[c],
                        "the ring and recursive doubling agree bit for bit: this count cannot "
                        "show which one ran");
        if (sides[c].recursive_doubling) {
          CHECK_MESSAGE(automatic[c] == doubling[c], "automatic did not run recursive doubling");
        } else {
          CHECK_MESSAGE(automatic[c] == ring[c], "automatic did not run the ring");
        }
      }
    };
    results_of(std::type_identity<float>{}, test.floats);
    results_of(std::type_identity<double>{}, test.doubles);
  }
}

TEST_CASE("every connection has the TCP_NODELAY and socket buffer sizes the options ask for") {
  struct Case {
    bool no_delay;
    int buffer_bytes;  // 0: the kernel's autotuned default, not checked
    int connections_per_peer;
  };
  // Two different sizes: a value that happened to be the kernel's default cannot pass both.
  for (const Case& test : {Case{true, 0, 1}, Case{false, 48 * 1024, 2}, Case{true, 80 * 1024, 1}}) {
    CAPTURE(test.no_delay);
    CAPTURE(test.buffer_bytes);
    constexpr int kSize = 3;
    Ports ports(kSize);
    TcpOptions tcp;
    tcp.no_delay = test.no_delay;
    tcp.socket_buffer_bytes = test.buffer_bytes;
    tcp.connections_per_peer = test.connections_per_peer;
    auto group = form_group(ports, tcp);
    const auto fds = connections_on(ports.addresses);
    // Both ends of the control and data connections of every pair live in this process.
    CHECK(fds.size() ==
          static_cast<std::size_t>(kSize * (kSize - 1) / 2 * (1 + test.connections_per_peer) * 2));
    for (int fd : fds) {
      CAPTURE(fd);
      CHECK((int_option(fd, IPPROTO_TCP, TCP_NODELAY) != 0) == test.no_delay);
      if (test.buffer_bytes > 0) {
        CHECK(int_option(fd, SOL_SOCKET, SO_SNDBUF) ==
              reported_buffer_bytes(test.buffer_bytes, "/proc/sys/net/core/wmem_max"));
        CHECK(int_option(fd, SOL_SOCKET, SO_RCVBUF) ==
              reported_buffer_bytes(test.buffer_bytes, "/proc/sys/net/core/rmem_max"));
      }
    }
    // The group still works with these options.
    std::vector<int> sums(kSize, 0);
    {
      std::vector<std::jthread> threads;
      for (int r = 0; r < kSize; ++r)
        threads.emplace_back([&, r] {
          int value = r + 1;
          try {
            group[static_cast<std::size_t>(r)].all_reduce(std::span(&value, 1),
                                                          strata::ReduceOp::sum);
          } catch (...) {
            value = -1;  // shows in the check below
          }
          sums[static_cast<std::size_t>(r)] = value;
        });
    }
    CHECK(sums == std::vector<int>(kSize, 6));
  }
}

TEST_CASE("connections within one host run reno unless the options name a congestion control") {
  std::string kernel_default;
  std::ifstream("/proc/sys/net/ipv4/tcp_congestion_control") >> kernel_default;
  REQUIRE_FALSE(kernel_default.empty());
  // Unset: reno, whatever the host's default; named: that one (the kernel's default is always
  // allowed, so this holds without privileges).
  for (const std::optional<std::string>& named :
       {std::optional<std::string>{}, std::optional<std::string>{kernel_default}}) {
    CAPTURE(named.value_or("(unset)"));
    Ports ports(2);
    TcpOptions tcp;
    tcp.congestion_control = named;
    auto group = form_group(ports, tcp);
    const auto fds = connections_on(ports.addresses);
    CHECK(fds.size() == 4);
    for (int fd : fds)
      CHECK(congestion_of(fd) == named.value_or("reno"));
  }
}

TEST_CASE("a congestion control the kernel does not have is a ConfigurationError naming it") {
  CommunicatorOptions options;
  options.timeout = std::chrono::seconds(10);
  for (const std::string& name :
       {std::string("no-such-cc"), std::string(""), std::string("a-name-of-20-chars..")}) {
    CAPTURE(name);
    Ports ports(2);
    TcpOptions tcp;
    tcp.congestion_control = name;
    std::vector<std::exception_ptr> errors(2);
    {
      std::vector<std::jthread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          const auto i = static_cast<std::size_t>(r);
          try {
            TcpCommunicator comm(TcpMembership{r, ports.addresses, 0, ports.fds[i]}, tcp, options);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        });
    }
    for (const auto& error : errors) {
      REQUIRE(error);
      try {
        std::rethrow_exception(error);
      } catch (const strata::ConfigurationError& e) {
        CHECK(std::string_view(e.what()).find("'" + name + "'") != std::string_view::npos);
        CHECK(std::string_view(e.what()).find("tcp_allowed_congestion_control") !=
              std::string_view::npos);
      } catch (const std::exception& e) {
        FAIL_CHECK("not a ConfigurationError: " << e.what());
      }
    }
    // The listening sockets were handed over: refusing to join closed them.
    for (int fd : ports.fds)
      CHECK(::fcntl(fd, F_GETFD) == -1);
  }
}
