// Tests of strata/transport/shm/collectives.hpp and arena.hpp against what a peer posts: an
// all-reduce in a group with arenas reads a peer's buffer only where the peer's offsets and the
// agreed size keep it inside that peer's arena; offsets that leave it are a PeerFailureError
// before any byte is read. And the arena's allocator: disjoint, aligned buffers, free ranges
// merged on release. (Results, against the staged path and the reference, and a peer that
// keeps its buffer out of its arena: tests/communicator/tcp_shared_memory_test.cpp.)
#include <strata/transport/shm/arena.hpp>
#include <strata/transport/shm/collectives.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

namespace {

namespace shm = strata::transport::shm;

// Gives up after a few sleeping slices: no test here should wait for a peer.
struct Impatient {
  int slices = 0;
  void operator()(int peer) {
    if (++slices > 4) throw strata::TimeoutError(0, "all_reduce", fmt::format("rank {}", peer));
  }
  [[noreturn]] void group_failed() { throw strata::PeerFailureError(0, "all_reduce", "failed"); }
};

constexpr shm::Layout kLayout{2, 64 << 10, 1 << 20};

struct Pair {
  shm::Group rank0;
  shm::Group rank1;
};

std::unique_ptr<Pair> make_pair() {
  auto region = shm::Region::create(kLayout.total_bytes(), 0);
  shm::Group::initialize(region, kLayout);
  auto second = shm::Region::adopt(::dup(region.fd()), kLayout.total_bytes(), 1, 0);
  return std::make_unique<Pair>(Pair{shm::Group(std::move(region), kLayout, 0, false),
                                     shm::Group(std::move(second), kLayout, 1, false)});
}

}  // namespace

TEST_CASE("a peer's offsets that leave its arena are refused before anything is read") {
  constexpr std::size_t kCount = 8192;  // 32 KiB: above a one-step call
  const std::size_t bytes = kCount * sizeof(float);
  for (const std::uint64_t offset :
       {std::uint64_t{kLayout.arena_bytes - 64}, std::uint64_t{kLayout.arena_bytes + 4096},
        std::uint64_t{UINT64_MAX - 1}}) {
    CAPTURE(offset);
    auto pair = make_pair();
    auto* data = reinterpret_cast<float*>(pair->rank0.arena(0));
    for (std::size_t i = 0; i < kCount; ++i)
      data[i] = 1.0F;
    strata::CollectiveCall call{strata::Collective::all_reduce,
                                strata::DataType::float32,
                                kCount,
                                strata::ReduceOp::sum,
                                0,
                                data,
                                data};
    // Rank 1 posts the same call with a send buffer outside its arena, and a good recv one.
    pair->rank1.post(call, call, 0);
    pair->rank1.post_buffers(0, {offset, 0});
    pair->rank1.publish();
    Impatient watch;
    try {
      shm::run(pair->rank0, call, 0, watch);
      FAIL("the offsets were accepted");
    } catch (const strata::PeerFailureError& error) {
      const std::string_view what = error.what();
      CHECK(what.find("rank 1 posted a buffer of 32768 bytes") != std::string_view::npos);
    }
    for (std::size_t i = 0; i < kCount; ++i)
      REQUIRE(data[i] == 1.0F);
  }
  // In range, both offsets name where rank 1's data lies: the call runs once rank 1 does its part.
  CHECK(make_pair()->rank0.fits_arena(kLayout.arena_bytes - bytes, bytes));
  CHECK_FALSE(make_pair()->rank0.fits_arena(kLayout.arena_bytes - bytes + 1, bytes));
}

TEST_CASE("a rank's own buffers are in its arena only when wholly inside it") {
  auto pair = make_pair();
  const shm::Group& group = pair->rank0;
  std::byte* arena = group.arena(0);
  CHECK(group.arena_offset_of(arena, kLayout.arena_bytes) == 0);
  CHECK(group.arena_offset_of(arena + 128, 64) == 128);
  CHECK(group.arena_offset_of(arena + 64, kLayout.arena_bytes) == shm::Group::kNotInArena);
  CHECK(group.arena_offset_of(pair->rank0.arena(1), 64) == shm::Group::kNotInArena);
  std::vector<std::byte> elsewhere(64);
  CHECK(group.arena_offset_of(elsewhere.data(), 64) == shm::Group::kNotInArena);
}

TEST_CASE("the arena gives disjoint aligned buffers, merges what is released, says when full") {
  auto pair = make_pair();
  auto group = std::make_shared<shm::Group>(std::move(pair->rank0));
  shm::Arena arena(group);
  REQUIRE(arena.size() == kLayout.arena_bytes);
  std::vector<std::size_t> offsets;
  for (int i = 0; i < 16; ++i) {
    const auto offset = arena.allocate(i == 0 ? 1 : (64 << 10) - 63);  // rounded to 64 KiB
    REQUIRE(offset);
    offsets.push_back(*offset);
  }
  CHECK(offsets[0] == 0);
  CHECK(offsets[1] == 64);  // 1 byte takes one cache line
  CHECK_FALSE(arena.allocate(64 << 10));
  for (std::size_t i = 1; i < offsets.size(); ++i)
    CHECK(offsets[i] % 64 == 0);
  arena.release(offsets[4]);
  arena.release(offsets[6]);
  CHECK_FALSE(arena.allocate(2 * (64 << 10)));  // two holes, not one range
  arena.release(offsets[5]);
  const auto merged = arena.allocate(3 * (64 << 10));
  REQUIRE(merged);
  CHECK(*merged == offsets[4]);
  arena.release(12345);  // not a buffer: ignored
  for (const std::size_t offset : offsets)
    arena.release(offset);
  arena.release(*merged);
  CHECK(arena.free_bytes() == kLayout.arena_bytes);
  CHECK(arena.allocate(kLayout.arena_bytes) == std::optional<std::size_t>(0));
  CHECK_FALSE(arena.allocate(SIZE_MAX));
}
