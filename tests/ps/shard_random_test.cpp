// The parameter-server fuzz target (tests/support/fuzz/ps_shard.hpp) over its seed corpus and
// bounded random programs built from valid specs, so that every build checks what the fuzzer
// checks: decoders that round-trip, and pushes under every sync policy that keep the shard's
// invariants whatever order and mix of replicas, steps and optimizers arrive.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/ps/protocol.hpp>

#include "fuzz/ps_shard.hpp"

namespace {

class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(next() % n); }

 private:
  std::uint64_t state_;
};

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <std::size_t N>
void append(std::vector<std::uint8_t>& out, const std::array<std::byte, N>& bytes) {
  for (const std::byte b : bytes)
    out.push_back(static_cast<std::uint8_t>(b));
}

// A program of mostly valid steps under one policy, with a few bytes flipped.
std::vector<std::uint8_t> random_program(Random& random) {
  using strata::ps::SyncSpec;
  std::vector<std::uint8_t> program{static_cast<std::uint8_t>(random.next())};
  const auto mode = static_cast<SyncSpec::Mode>(random.below(3));
  const std::uint32_t replicas = 1 + random.below(4);
  const std::uint32_t bound =
      mode == SyncSpec::Mode::synchronous ? 1 + random.below(replicas) : random.below(3);
  std::vector<std::uint64_t> steps(replicas, 0);
  const std::uint32_t length = 1 + random.below(40);
  for (std::uint32_t i = 0; i < length; ++i) {
    SyncSpec sync;
    sync.mode = mode;
    sync.replicas = replicas;
    sync.bound = bound;
    sync.replica = random.below(replicas);
    sync.aggregation = static_cast<SyncSpec::Aggregation>(random.below(2));
    sync.step = steps[sync.replica] + (random.below(8) == 0 ? 1 : 0);
    if (random.below(3) == 0) ++steps[sync.replica];
    strata::ps::OptimizerSpec optimizer{
        static_cast<strata::ps::OptimizerSpec::Kind>(random.below(5)), 0.5, 0.9, 0.9, 0.999, 1e-7};
    append(program, strata::ps::encode(sync));
    append(program, strata::ps::encode(optimizer));
    // The caller: its replica's slot, a finished worker now and then.
    program.push_back(
        static_cast<std::uint8_t>(random.below(16) == 0 ? 0x80 | random.below(4) : sync.replica));
    if (random.below(10) == 0)
      program[1 + random.below(static_cast<std::uint32_t>(program.size() - 1))] ^= 0x01;
  }
  return program;
}

}  // namespace

TEST_CASE("every file of the seed corpus passes through the fuzz target") {
  const auto directory =
      std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" / "ps_shard";
  REQUIRE(std::filesystem::is_directory(directory));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const auto bytes = read_file(entry.path());
    CAPTURE(entry.path().filename().string());
    strata::testing::fuzz_ps_shard(bytes);
    ++files;
  }
  CHECK(files >= 3);
}

TEST_CASE("random programs of pushes keep the shard's invariants") {
  Random random(20261127);
  for (int i = 0; i < 20000; ++i) {
    const auto program = random_program(random);
    strata::testing::fuzz_ps_shard(program);
  }
}

TEST_CASE("random bytes never crash the decoders or the shard") {
  Random random(7);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> bytes(random.below(400));
    for (auto& b : bytes)
      b = static_cast<std::uint8_t>(random.next());
    strata::testing::fuzz_ps_shard(bytes);
  }
}
