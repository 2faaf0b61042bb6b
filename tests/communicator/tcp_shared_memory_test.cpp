// Tests of strata/communicator/tcp.hpp between ranks of one host, which move data through
// shared memory (transport/shm/): every rank a thread of this process, each with its own
// mapping of the region, as separate processes would have.
//   - which groups share memory: co-located ranks by default, none with the option off or
//     alone;
//   - conformance of every collective against the one collective reference: the small-count
//     product at world sizes 1..8, counts on both sides of the one-step size, and the large
//     counts at world sizes 1..4, with the default staging buffers (512 KiB) and the smallest
//     (32 KiB: many chunks);
//   - all-reduce results bit-identical on every rank and equal to the sum in rank order, on
//     the one-step and the chunked path;
//   - small and chunked calls interleaved while ranks run ahead or sleep: each small call's
//     box read for its own call;
//   - the region is a memfd: nothing in /dev/shm, and no mapping left once the group is gone;
//   - buffers in the ranks' arenas (allocate_shared): all-reduces on them bit for bit the
//     staged ones, for three element types, four ops, in place and not, guards intact; the
//     staged path when one rank's buffer is not in its arena; the arena's allocator.
// Failure semantics run over both transports in tcp_failure_test.cpp; processes (SIGKILL,
// SIGSTOP, conformance) in tcp_process_test.cpp; two network namespaces in
// tcp_netns_test.cpp.
#include <strata/communicator/tcp.hpp>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <collective_reference/elements.hpp>
#include <collective_reference/inputs.hpp>

#include "conformance_runner.hpp"
#include "sweep_plan.hpp"
#include "sweep_report.hpp"

namespace {

using strata::DataType;
using strata::ReduceOp;
using strata::communicator::Collective;
using strata::communicator::TcpCommunicator;
using strata::communicator::TcpOptions;
namespace testing = strata::testing;
namespace reference = strata::reference;

TcpOptions staging(std::size_t bytes) {
  TcpOptions tcp;
  tcp.chunk_bytes = bytes;
  return tcp;
}

const TcpOptions kDefault = staging(std::size_t{1} << 20);
const TcpOptions kSmallest = staging(std::size_t{64} << 10);  // stages the least, 32 KiB
const std::pair<const char*, TcpOptions> kStagings[] = {{"shm", kDefault},
                                                        {"shm<32 KiB>", kSmallest}};

testing::ConformanceRunner<TcpCommunicator> runner_for(std::string name, const TcpOptions& tcp) {
  return testing::ConformanceRunner<TcpCommunicator>(
      std::move(name), {}, [tcp](int size, const strata::communicator::CommunicatorOptions& o) {
        auto group = TcpCommunicator::create(size, o, tcp);
        for (const auto& rank : group)
          REQUIRE(rank.uses_shared_memory() == (size > 1));
        return group;
      });
}

using strata::testing::report;

constexpr Collective kEveryKind[] = {Collective::all_reduce, Collective::broadcast,
                                     Collective::reduce, Collective::all_gather,
                                     Collective::reduce_scatter};

// Rank `rank`'s input at `index`: magnitudes spread over 2^-20..2^20, so that partial sums
// round and the order of additions shows in the bits.
float spread_value(int rank, std::size_t index) {
  const std::uint64_t h =
      reference::mix64(index * 0x9e3779b97f4a7c15ULL + (static_cast<std::uint64_t>(rank) << 48));
  const float unit = static_cast<float>(h >> 40) * std::ldexp(1.0F, -24) - 0.5F;
  return std::ldexp(unit, static_cast<int>(reference::mix64(h) % 41) - 20);
}

std::vector<std::string> memfd_mappings() {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find("memfd:strata-shm") != std::string::npos) found.push_back(line);
  return found;
}

std::size_t dev_shm_entries() {
  std::size_t entries = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    (void)entry;
    ++entries;
  }
  return entries;
}

}  // namespace

TEST_CASE("co-located ranks share memory unless the option says no or a rank is alone") {
  for (const int size : {2, 3, 5}) {
    CAPTURE(size);
    for (const auto& rank : TcpCommunicator::create(size))
      CHECK(rank.uses_shared_memory());
    TcpOptions off;
    off.shared_memory = false;
    for (const auto& rank : TcpCommunicator::create(size, {}, off))
      CHECK_FALSE(rank.uses_shared_memory());
  }
  CHECK_FALSE(TcpCommunicator::create(1)[0].uses_shared_memory());
}

TEST_CASE("the region is a memfd: nothing in /dev/shm, no mapping once the group is gone") {
  const auto before = memfd_mappings();
  const std::size_t shm_entries = dev_shm_entries();
  {
    auto group = TcpCommunicator::create(3);
    // One mapping per rank (the threads of this test each map it, as processes would).
    CHECK(memfd_mappings().size() == before.size() + 3);
    CHECK(dev_shm_entries() == shm_entries);
  }
  CHECK(memfd_mappings().size() == before.size());
  CHECK(dev_shm_entries() == shm_entries);
}

TEST_CASE("shared memory: every collective matches the reference at small counts, sizes 1-8") {
  for (const auto& [name, tcp] : kStagings) {
    CAPTURE(name);
    auto runner = runner_for(name, tcp);
    for (Collective kind : kEveryKind) {
      CAPTURE(kind);
      report(testing::run_cases(runner,
                                testing::thinned_when_quick(testing::small_count_cases(kind))));
    }
  }
}

TEST_CASE("shared memory: counts on both sides of the one-step size and of a chunk") {
  // 16 KiB is the most a rank stages for a one-step call; 32 KiB the smallest chunk. Counts
  // of elements just below, at and above each in bytes, and primes, on 2, 3 and 4 ranks.
  std::vector<testing::CaseSpec> cases;
  const std::size_t counts[] = {2047, 2048, 2049, 4095,  4096,  4097,
                                8191, 8192, 8193, 65521, 100003};
  for (Collective kind : kEveryKind)
    for (std::size_t count : counts)
      for (int size : {2, 3, 4})
        for (DataType type : {DataType::float32, DataType::float64, DataType::int8}) {
          testing::CaseSpec spec{kind, type, ReduceOp::sum, size, count};
          spec.root = size - 1;
          spec.in_place = (count + static_cast<std::size_t>(size)) % 2 == 1;
          cases.push_back(spec);
          if (kind == Collective::all_reduce) {
            spec.op = ReduceOp::mean;
            spec.in_place = !spec.in_place;
            cases.push_back(spec);
          }
        }
  for (const auto& [name, tcp] : kStagings) {
    CAPTURE(name);
    auto runner = runner_for(name, tcp);
    report(testing::run_cases(runner, cases));
  }
}

TEST_CASE("shared memory: collectives match the reference at 2^20+3 and 16 Mi elements") {
  // World sizes 1-4, as tcp_test.cpp's large counts; the smallest staging (hundreds of chunks)
  // for the two collectives whose chunks are cut per rank.
  for (const auto& [name, tcp] : kStagings) {
    CAPTURE(name);
    const bool smallest = std::string_view(name) != "shm";
    auto runner = runner_for(name, tcp);
    for (Collective kind : kEveryKind) {
      if (smallest && kind != Collective::all_reduce && kind != Collective::reduce_scatter)
        continue;
      CAPTURE(kind);
      std::vector<testing::CaseSpec> cases =
          testing::large_count_cases(kind, testing::sweep_from_environment(), smallest ? 1 : 0);
      std::erase_if(cases, [](const testing::CaseSpec& c) { return c.size > 4; });
      report(testing::run_cases(runner, cases));
    }
  }
}

TEST_CASE("shared memory: all-reduce is bit-identical on every rank and sums in rank order") {
  for (const int size : {2, 3, 4, 7}) {
    CAPTURE(size);
    auto group = TcpCommunicator::create(size, {}, kSmallest);
    const auto n = static_cast<std::size_t>(size);
    // One step (small), one chunk, several chunks with a short last one.
    for (const std::size_t count : {std::size_t{1000}, std::size_t{9000}, std::size_t{70001}}) {
      CAPTURE(count);
      std::vector<std::vector<float>> results(n);
      std::vector<std::exception_ptr> errors(n);
      {
        std::vector<std::jthread> threads;
        for (std::size_t r = 0; r < n; ++r)
          threads.emplace_back([&, r] {
            try {
              auto& data = results[r];
              data.resize(count);
              for (std::size_t i = 0; i < count; ++i)
                data[i] = spread_value(static_cast<int>(r), i);
              group[r].all_reduce(std::span(data), ReduceOp::sum);
            } catch (...) {
              errors[r] = std::current_exception();
            }
          });
      }
      for (const auto& error : errors)
        if (error) std::rethrow_exception(error);
      std::size_t differ = 0;
      std::size_t not_in_order = 0;
      for (std::size_t i = 0; i < count; ++i) {
        float sum = spread_value(0, i);
        for (int r = 1; r < size; ++r)
          sum += spread_value(r, i);
        not_in_order += reference::bits_of(results[0][i]) != reference::bits_of(sum) ? 1 : 0;
        for (std::size_t r = 1; r < n; ++r)
          differ += reference::bits_of(results[r][i]) != reference::bits_of(results[0][i]) ? 1 : 0;
      }
      CHECK(differ == 0);
      CHECK(not_in_order == 0);
    }
  }
}

TEST_CASE("shared memory: small and chunked calls interleaved, ranks out of step, every result") {
  // A small call's box is reused two steps later: a rank that runs ahead (a reduce's non-root
  // returns without waiting) or sleeps (its peers give up polling and sleep on the futex) must
  // still read every box's own call. Integer-valued floats: every sum is exact in any order.
  constexpr int kSize = 3;
  constexpr int kCalls = 120;
  auto group = TcpCommunicator::create(kSize, {}, kSmallest);
  std::vector<std::size_t> wrong(kSize, 0);
  std::vector<std::exception_ptr> errors(kSize);
  auto value = [](int rank, int call, std::size_t i) {
    return static_cast<float>(rank * 1000 + call + static_cast<int>(i % 97));
  };
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < kSize; ++r)
      threads.emplace_back([&, r] {
        try {
          std::vector<float> data;
          for (int call = 0; call < kCalls; ++call) {
            // One rank in turn arrives late, long enough for the others to sleep.
            if (call % 10 == r) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            const int root = call % kSize;
            const std::size_t count =
                call % 3 == 1 ? 100003 : static_cast<std::size_t>(1 + call * 37);
            data.resize(count);
            for (std::size_t i = 0; i < count; ++i)
              data[i] = value(r, call, i);
            auto& rank = group[static_cast<std::size_t>(r)];
            if (call % 3 == 2) {
              rank.broadcast(std::span(data), root);
              for (std::size_t i = 0; i < count; ++i)
                wrong[static_cast<std::size_t>(r)] += data[i] != value(root, call, i) ? 1 : 0;
              continue;
            }
            const bool reduce = call % 2 == 1;
            if (reduce)
              rank.reduce(std::span(data), ReduceOp::sum, root);
            else
              rank.all_reduce(std::span(data), ReduceOp::sum);
            if (reduce && r != root) continue;
            for (std::size_t i = 0; i < count; ++i) {
              float sum = 0;
              for (int q = 0; q < kSize; ++q)
                sum += value(q, call, i);
              wrong[static_cast<std::size_t>(r)] += data[i] != sum ? 1 : 0;
            }
          }
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
  }
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
  for (int r = 0; r < kSize; ++r) {
    CAPTURE(r);
    CHECK(wrong[static_cast<std::size_t>(r)] == 0);
  }
}

namespace {

// Runs `body(rank)` on a thread per rank of `group`; rethrows the first rank's exception.
template <class Body>
void on_every_rank(std::vector<TcpCommunicator>& group, Body body) {
  std::vector<std::exception_ptr> errors(group.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < group.size(); ++r)
      threads.emplace_back([&, r] {
        try {
          body(static_cast<int>(r));
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  }
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

TcpOptions with_arena(std::size_t bytes) {
  TcpOptions tcp = kSmallest;  // many chunks on the staged path it is compared with
  tcp.shared_buffer_bytes = bytes;
  return tcp;
}

// Element i of rank r's input: spread magnitudes for floats, small integers otherwise.
template <class T>
T input_value(int rank, std::size_t i) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(spread_value(rank, i));
  else
    return static_cast<T>(
        static_cast<int>(reference::mix64(i * 31 + static_cast<std::size_t>(rank)) % 7) - 3);
}

}  // namespace

TEST_CASE_TEMPLATE("shared buffers: an all-reduce in the arenas is bit for bit the staged one", T,
                   float, double, std::int32_t) {
  // The staged path is checked against the collective reference above; the in-place one must
  // give the same bits on every rank, in place and not, for every op, with guards intact.
  constexpr std::size_t kGuard = 64 / sizeof(T);
  for (const int size : {2, 3, 4}) {
    CAPTURE(size);
    auto group = TcpCommunicator::create(size, {}, with_arena(std::size_t{40} << 20));
    for (const auto& rank : group)
      REQUIRE(rank.uses_shared_memory());
    for (const std::size_t count : {std::size_t{4097}, std::size_t{65539}, std::size_t{1048579}}) {
      for (const ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::product}) {
        for (const bool in_place : {true, false}) {
          CAPTURE(count);
          CAPTURE(op);
          CAPTURE(in_place);
          std::vector<std::size_t> differ(static_cast<std::size_t>(size), 0);
          std::vector<std::size_t> guards(static_cast<std::size_t>(size), 0);
          on_every_rank(group, [&](int r) {
            auto& rank = group[static_cast<std::size_t>(r)];
            // Guards on both sides of the buffers, inside the arena.
            strata::communicator::SharedBuffer send_buffer =
                rank.allocate_shared((count + 2 * kGuard) * sizeof(T));
            strata::communicator::SharedBuffer recv_buffer =
                rank.allocate_shared((count + 2 * kGuard) * sizeof(T));
            REQUIRE(send_buffer.shared());
            const std::span<T> send = send_buffer.as<T>().subspan(kGuard, count);
            const std::span<T> recv = recv_buffer.as<T>().subspan(kGuard, count);
            for (auto b : {send_buffer.bytes(), recv_buffer.bytes()})
              std::memset(b.data(), 0x5a, b.size());
            std::vector<T> staged(count);
            for (std::size_t i = 0; i < count; ++i)
              send[i] = staged[i] = input_value<T>(r, i);
            rank.all_reduce(std::span(staged), op);
            if (in_place)
              rank.all_reduce(send, op);
            else
              rank.all_reduce(std::span<const T>(send), recv, op);
            const std::span<T> result = in_place ? send : recv;
            for (std::size_t i = 0; i < count; ++i)
              differ[static_cast<std::size_t>(r)] +=
                  std::memcmp(&result[i], &staged[i], sizeof(T)) != 0 ? 1 : 0;
            for (auto b : {send_buffer.bytes(), recv_buffer.bytes()}) {
              for (std::size_t g = 0; g < kGuard * sizeof(T); ++g) {
                guards[static_cast<std::size_t>(r)] += b[g] != std::byte{0x5a} ? 1 : 0;
                guards[static_cast<std::size_t>(r)] +=
                    b[b.size() - 1 - g] != std::byte{0x5a} ? 1 : 0;
              }
            }
          });
          for (int r = 0; r < size; ++r) {
            CAPTURE(r);
            CHECK(differ[static_cast<std::size_t>(r)] == 0);
            CHECK(guards[static_cast<std::size_t>(r)] == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("shared buffers: the sum in rank order, and the staged path when one rank's are not") {
  constexpr int kSize = 3;
  constexpr std::size_t kCount = 300007;
  auto group = TcpCommunicator::create(kSize, {}, with_arena(std::size_t{8} << 20));
  // Round 0: every rank's buffer in its arena; round 1: rank 1's in ordinary memory, so all
  // stage; round 2: in the arenas again.
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::vector<std::size_t> wrong(kSize, 0);
    on_every_rank(group, [&](int r) {
      auto& rank = group[static_cast<std::size_t>(r)];
      strata::communicator::SharedBuffer buffer = rank.allocate_shared(kCount * sizeof(float));
      std::vector<float> ordinary(kCount);
      const std::span<float> data =
          round == 1 && r == 1 ? std::span(ordinary) : buffer.as<float>().first(kCount);
      for (std::size_t i = 0; i < kCount; ++i)
        data[i] = spread_value(r, i);
      rank.all_reduce(data, ReduceOp::sum);
      for (std::size_t i = 0; i < kCount; ++i) {
        float sum = spread_value(0, i);
        for (int q = 1; q < kSize; ++q)
          sum += spread_value(q, i);
        wrong[static_cast<std::size_t>(r)] +=
            reference::bits_of(data[i]) != reference::bits_of(sum) ? 1 : 0;
      }
    });
    for (int r = 0; r < kSize; ++r) {
      CAPTURE(r);
      CHECK(wrong[static_cast<std::size_t>(r)] == 0);
    }
  }
}

TEST_CASE("shared buffers: the arena hands out disjoint buffers and takes them back") {
  auto group = TcpCommunicator::create(2, {}, with_arena(std::size_t{1} << 20));
  auto& rank = group[0];
  std::vector<strata::communicator::SharedBuffer> buffers;
  for (int i = 0; i < 16; ++i)
    buffers.push_back(rank.allocate_shared(64 << 10));  // the whole arena
  for (std::size_t i = 1; i < buffers.size(); ++i)
    CHECK(buffers[i - 1].bytes().data() + (64 << 10) <= buffers[i].bytes().data());
  for (const auto& buffer : buffers)
    CHECK(reinterpret_cast<std::uintptr_t>(buffer.bytes().data()) % 64 == 0);
  CHECK_THROWS_AS(rank.allocate_shared(1), strata::ConfigurationError);
  buffers.erase(buffers.begin() + 3, buffers.begin() + 6);  // three neighbours merge again
  CHECK_NOTHROW(buffers.push_back(rank.allocate_shared(3 * (64 << 10))));
  CHECK_THROWS_AS(rank.allocate_shared(std::size_t{2} << 20), strata::ConfigurationError);
  // Without an arena: the error says which option to raise; alone on its host, ordinary memory.
  auto plain = TcpCommunicator::create(2);
  try {
    (void)plain[0].allocate_shared(4096);
    FAIL("no arena, no error");
  } catch (const strata::ConfigurationError& error) {
    CHECK(std::string_view(error.what()).find("shared_buffer_bytes") != std::string_view::npos);
  }
  auto alone = TcpCommunicator::create(1, {}, with_arena(std::size_t{1} << 20));
  const auto buffer = alone[0].allocate_shared(1000);
  CHECK_FALSE(buffer.shared());
  CHECK(buffer.bytes().size() == 1000);
}
