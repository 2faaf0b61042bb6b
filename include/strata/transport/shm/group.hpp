// strata/transport/shm/group.hpp — co-located ranks meeting in one shared region: layout, steps,
// waits, failure.
//
// Each rank owns a block of the region: its step counter, the descriptors of its calls, its
// small calls' boxes and its staging buffers (two of each, alternating, so a rank may fill the
// next while its peers still read the last), then its arena, where it allocates buffers that its
// peers read in place (arena.hpp; none unless TcpOptions::shared_buffer_bytes asks). A rank writes
// only its own block and publishes what it wrote by raising its step counter (and, for a small
// call, its box's step first); its peers wait for the step, then read. Every rank passes the same
// steps in the same order (the collectives' schedules depend only on the agreed call), so "peer q
// reached step s" is the whole protocol: no locks, no shared counters that ranks contend for.
//
// Waits poll briefly, then sleep on a futex on the awaited counter, in slices: between slices
// the caller's watch looks at the peers (their TCP control connections say when one died or
// failed the group) and at the deadline, so no rank sleeps on a futex a dead peer would never
// wake. A rank that fails sets the region's failure word and wakes every sleeper.
#pragma once

#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <optional>
#include <utility>
#include <vector>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/detail/spin_wait.hpp>
#include <strata/transport/shm/region.hpp>

namespace strata::transport::shm {

static_assert(std::endian::native == std::endian::little,
              "the futex word is the low half of a step counter");

/// Where everything lives in a region of `size` ranks with staging buffers of `slot_bytes`.
struct Layout {
  /// Per rank and parity: what a call small enough moves in one step (latency-bound sizes).
  static constexpr std::size_t kSmallBytes = std::size_t{16} << 10;
  static constexpr std::size_t kHeaderBytes = 4096;
  static constexpr std::uint64_t kMagic = 0x6d68732d61746173;  // "sata-shm" in memory
  static constexpr std::size_t kFailed = 64;  // in the header: nonzero once any rank failed
  // Offsets inside a rank's block: each counter on a cache line of its own.
  static constexpr std::size_t kStep = 0;
  static constexpr std::size_t kSleepers = 64;
  static constexpr std::size_t kDescriptors = 128;  // two of kDescriptorBytes
  static constexpr std::size_t kDescriptorBytes = 64;
  static constexpr std::size_t kSmall = 256;  // two boxes of kBoxBytes
  // A small call's box: the step that published it, the call's two descriptors, then its data.
  // A peer's wait ends on the box's first cache line, which also holds the descriptors and the
  // first 24 bytes of data: a call that small costs one cache line from each peer.
  static constexpr std::size_t kBoxStep = 0;
  static constexpr std::size_t kBoxDescriptors = 8;  // the call's, then the user's: 16 bytes each
  static constexpr std::size_t kBoxData = 40;
  static constexpr std::size_t kBoxBytes = (kBoxData + kSmallBytes + 63) / 64 * 64;

  int size = 1;
  std::size_t slot_bytes = 0;   // a multiple of 64
  std::size_t arena_bytes = 0;  // a multiple of 4096

  std::size_t chunks_offset() const noexcept { return kSmall + 2 * kBoxBytes; }
  std::size_t arena_offset() const noexcept {
    return (chunks_offset() + 2 * slot_bytes + 4095) / 4096 * 4096;
  }
  std::size_t block_bytes() const noexcept { return arena_offset() + arena_bytes; }
  std::size_t total_bytes() const noexcept {
    return kHeaderBytes + static_cast<std::size_t>(size) * block_bytes();
  }
};

/// One rank's view of the region. One thread at a time drives a rank; `fail` is safe from any.
class Group {
 public:
  /// The longest a waiter sleeps before it looks at its peers again: how long a dead peer can
  /// go unnoticed.
  static constexpr std::chrono::nanoseconds kSleepSlice = std::chrono::milliseconds(5);

  Group(Region region, Layout layout, int rank, bool spin)
      : region_(std::move(region)), layout_(layout), rank_(rank) {
    if (!spin) spin_.spins = 0;
  }

  /// Writes the header a region's creator writes before handing it over.
  static void initialize(const Region& region, const Layout& layout) noexcept {
    std::byte* header = region.data();
    const std::uint64_t magic = Layout::kMagic;
    const auto size = static_cast<std::uint64_t>(layout.size);
    const auto slot = static_cast<std::uint64_t>(layout.slot_bytes);
    const auto arena = static_cast<std::uint64_t>(layout.arena_bytes);
    std::memcpy(header, &magic, 8);
    std::memcpy(header + 8, &size, 8);
    std::memcpy(header + 16, &slot, 8);
    std::memcpy(header + 24, &arena, 8);
  }

  /// Whether an adopted region's header says what this rank expects.
  static bool describes(const Region& region, const Layout& layout) noexcept {
    std::uint64_t fields[4];
    std::memcpy(fields, region.data(), sizeof fields);
    return fields[0] == Layout::kMagic && fields[1] == static_cast<std::uint64_t>(layout.size) &&
           fields[2] == static_cast<std::uint64_t>(layout.slot_bytes) &&
           fields[3] == static_cast<std::uint64_t>(layout.arena_bytes);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return layout_.size; }
  std::size_t slot_bytes() const noexcept { return layout_.slot_bytes; }
  std::size_t arena_bytes() const noexcept { return layout_.arena_bytes; }

  /// Rank `r`'s arena (Layout::arena_bytes): the buffers it allocated for its calls.
  std::byte* arena(int r) const noexcept { return block(r) + layout_.arena_offset(); }

  /// What a rank posts for a buffer outside its arena.
  static constexpr std::uint64_t kNotInArena = UINT64_MAX;

  /// Where `bytes` from `p` lie in this rank's arena, or kNotInArena.
  std::uint64_t arena_offset_of(const void* p, std::size_t bytes) const noexcept {
    const auto begin = reinterpret_cast<std::uintptr_t>(arena(rank_));
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    if (at < begin || at - begin > layout_.arena_bytes ||
        bytes > layout_.arena_bytes - (at - begin))
      return kNotInArena;
    return at - begin;
  }

  /// Whether `bytes` from `offset` (as a peer posted it) lie inside an arena.
  bool fits_arena(std::uint64_t offset, std::size_t bytes) const noexcept {
    return offset <= layout_.arena_bytes && bytes <= layout_.arena_bytes - offset;
  }

  /// Rank `r`'s staging buffer for the small call (one that fits kSmallBytes) published at
  /// `step`: the data of its box.
  std::byte* small(int r, std::uint64_t step) const noexcept {
    return box(r, step) + Layout::kBoxData;
  }
  /// Rank `r`'s staging buffer of `parity` for chunks of `slot_bytes`.
  std::byte* chunk(int r, std::uint64_t parity) const noexcept {
    return block(r) + layout_.chunks_offset() + (parity & 1u) * layout_.slot_bytes;
  }

  /// The step this rank published last; every rank's first is 1.
  std::uint64_t step() const noexcept { return step_; }
  /// Numbers the chunks of every call, so consecutive chunks alternate staging buffers.
  std::uint64_t next_chunk() noexcept { return chunks_++; }

  /// Publishes the next step: what this rank wrote before is visible to a peer that saw it.
  void publish() noexcept {
    ++step_;
    counter(rank_, Layout::kStep).store(step_, std::memory_order_seq_cst);
    // seq_cst on both sides: a sleeper either sees the new step or is counted here.
    if (sleepers(rank_).load(std::memory_order_seq_cst) != 0) wake(rank_);
  }

  /// Publishes the next step as a small call's: its box (data staged at `small(rank(), step()
  /// + 1)`, descriptors posted by `post_small`) first, then the step counter, as `publish`.
  void publish_small() noexcept {
    box_step(rank_, step_ + 1).store(step_ + 1, std::memory_order_release);
    publish();
  }

  /// Waits until `peer` has published `step`. `watch(rank)` runs between sleeping slices, with
  /// the peer's rank in the whole group (group_rank), and throws to end the wait (a dead peer, the
  /// deadline); `watch.group_failed()` is called, and must throw, once any rank has failed the
  /// group.
  template <class Watch>
  void wait_for(int peer, std::uint64_t step, Watch& watch) {
    wait_until(peer, step, counter(peer, Layout::kStep), watch);
  }

  /// Waits until every peer has published `step`.
  template <class Watch>
  void wait_all(std::uint64_t step, Watch& watch) {
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank_) wait_for(peer, step, watch);
  }

  /// Waits until every peer has published `step` as a small call (`publish_small`), looking at
  /// their boxes: what the wait reads is what the call reads next.
  template <class Watch>
  void wait_all_small(std::uint64_t step, Watch& watch) {
    for (int peer = 0; peer < size(); ++peer)
      if (peer != rank_) wait_until(peer, step, box_step(peer, step), watch);
  }

  /// What a rank posts for a call: the call on the region, and the call its user made (the
  /// same, unless the region runs one stage of a collective across hosts).
  struct Posted {
    CollectiveCall call;
    CollectiveCall user;
  };

  /// Posts this rank's calls into the descriptor slot of call number `call_number`, before the
  /// step that publishes them.
  void post(const CollectiveCall& call, const CollectiveCall& user,
            std::uint64_t call_number) noexcept {
    write_posted(descriptor(rank_, call_number), call, user);
  }

  /// What rank `r` posted as call number `call_number`, or nullopt for bytes that name no call
  /// (a peer's memory is not trusted to hold valid enumerators).
  std::optional<Posted> posted(int r, std::uint64_t call_number) const noexcept {
    return read_posted(descriptor(r, call_number));
  }

  /// Where a call's send and recv buffers lie in the arena (arena_offset_of), posted after
  /// `post` for the same call.
  struct Buffers {
    std::uint64_t send = kNotInArena;
    std::uint64_t recv = kNotInArena;
  };
  void post_buffers(std::uint64_t call_number, Buffers buffers) noexcept {
    std::memcpy(descriptor(rank_, call_number) + kBuffersAt, &buffers, sizeof buffers);
  }
  /// What rank `r` posted with `post_buffers`: offsets it claims, for the caller to check.
  Buffers posted_buffers(int r, std::uint64_t call_number) const noexcept {
    Buffers buffers;
    std::memcpy(&buffers, descriptor(r, call_number) + kBuffersAt, sizeof buffers);
    return buffers;
  }

  /// Posts this rank's calls into its box of the next step, for `publish_small`.
  void post_small(const CollectiveCall& call, const CollectiveCall& user) noexcept {
    write_posted(box(rank_, step_ + 1) + Layout::kBoxDescriptors, call, user);
  }

  /// What rank `r` posted with the small call it published at `step`, as `posted`.
  std::optional<Posted> posted_small(int r, std::uint64_t step) const noexcept {
    return read_posted(box(r, step) + Layout::kBoxDescriptors);
  }

  /// The rank of the whole group that local rank `r` is, for messages.
  int group_rank(int r) const noexcept {
    return group_ranks_.empty() ? r : group_ranks_[static_cast<std::size_t>(r)];
  }
  /// Names the ranks of the region by their ranks in a group that spans hosts.
  void name_ranks(std::vector<int> group_ranks) { group_ranks_ = std::move(group_ranks); }

  bool failed() const noexcept { return failed_word().load(std::memory_order_acquire) != 0; }
  /// Marks the region failed and wakes every sleeper of every rank.
  void fail() noexcept {
    failed_word().store(1, std::memory_order_seq_cst);
    for (int r = 0; r < size(); ++r)
      wake(r);
  }

 private:
  static void encode(const CollectiveCall& call, std::byte* out) noexcept {
    out[0] = static_cast<std::byte>(call.kind);
    out[1] = static_cast<std::byte>(call.type);
    out[2] = static_cast<std::byte>(call.op);
    const auto root = static_cast<std::int32_t>(call.root);
    const auto count = static_cast<std::uint64_t>(call.count);
    std::memcpy(out + 4, &root, 4);
    std::memcpy(out + 8, &count, 8);
  }

  static std::optional<CollectiveCall> decode(const std::byte* in) noexcept {
    const auto kind = static_cast<unsigned>(in[0]);
    const auto type = static_cast<unsigned>(in[1]);
    const auto op = static_cast<unsigned>(in[2]);
    if (kind > static_cast<unsigned>(Collective::barrier) ||
        type > static_cast<unsigned>(DataType::float64) ||
        op > static_cast<unsigned>(ReduceOp::mean))
      return std::nullopt;
    CollectiveCall call;
    call.kind = static_cast<Collective>(kind);
    call.type = static_cast<DataType>(type);
    call.op = static_cast<ReduceOp>(op);
    std::int32_t root = 0;
    std::uint64_t count = 0;
    std::memcpy(&root, in + 4, 4);
    std::memcpy(&count, in + 8, 8);
    call.root = root;
    call.count = static_cast<std::size_t>(count);
    return call;
  }

  // In a descriptor slot: the two descriptors, 16 bytes each, then the call's Buffers.
  static constexpr std::size_t kBuffersAt = 32;
  static_assert(kBuffersAt + sizeof(Buffers) <= Layout::kDescriptorBytes);

  // The two descriptors, 16 bytes each, as read_posted reads them.
  static void write_posted(std::byte* out, const CollectiveCall& call,
                           const CollectiveCall& user) noexcept {
    std::memset(out, 0, 32);
    encode(call, out);
    encode(user, out + 16);
  }

  static std::optional<Posted> read_posted(const std::byte* in) noexcept {
    auto call = decode(in);
    auto user = decode(in + 16);
    if (!call || !user) return std::nullopt;
    return Posted{*call, *user};
  }

  // Polls `awaited` (a step counter, or a box's step), then sleeps on the peer's step counter,
  // which every publish raises after the box.
  template <class Watch>
  void wait_until(int peer, std::uint64_t step, std::atomic_ref<std::uint64_t> awaited,
                  Watch& watch) {
    auto ready = [&] { return awaited.load(std::memory_order_acquire) >= step || failed(); };
    if (!spin_.poll(ready)) {
      auto sleeping = sleepers(peer);
      auto published = counter(peer, Layout::kStep);
      for (;;) {
        sleeping.fetch_add(1, std::memory_order_seq_cst);
        const std::uint64_t seen = published.load(std::memory_order_seq_cst);
        if (seen < step && !failed()) sleep(peer, seen);
        sleeping.fetch_sub(1, std::memory_order_relaxed);
        if (ready()) break;
        watch(group_rank(peer));
      }
    }
    if (failed()) watch.group_failed();
  }

  std::byte* block(int r) const noexcept {
    return region_.data() + Layout::kHeaderBytes +
           static_cast<std::size_t>(r) * layout_.block_bytes();
  }
  std::byte* descriptor(int r, std::uint64_t call_number) const noexcept {
    return block(r) + Layout::kDescriptors + (call_number & 1u) * Layout::kDescriptorBytes;
  }
  // Rank `r`'s box of the small call published at `step`: boxes alternate by step.
  std::byte* box(int r, std::uint64_t step) const noexcept {
    return block(r) + Layout::kSmall + (step & 1u) * Layout::kBoxBytes;
  }
  std::atomic_ref<std::uint64_t> box_step(int r, std::uint64_t step) const noexcept {
    return std::atomic_ref<std::uint64_t>(
        *reinterpret_cast<std::uint64_t*>(box(r, step) + Layout::kBoxStep));
  }
  std::atomic_ref<std::uint64_t> counter(int r, std::size_t offset) const noexcept {
    return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(block(r) + offset));
  }
  std::atomic_ref<std::uint32_t> sleepers(int r) const noexcept {
    return std::atomic_ref<std::uint32_t>(
        *reinterpret_cast<std::uint32_t*>(block(r) + Layout::kSleepers));
  }
  std::atomic_ref<std::uint32_t> failed_word() const noexcept {
    return std::atomic_ref<std::uint32_t>(
        *reinterpret_cast<std::uint32_t*>(region_.data() + Layout::kFailed));
  }

  std::uint32_t* futex_word(int r) const noexcept {
    return reinterpret_cast<std::uint32_t*>(block(r) + Layout::kStep);
  }

  // Sleeps until rank `r`'s step changes from `seen`, a slice at most.
  void sleep(int r, std::uint64_t seen) const noexcept {
    timespec slice{0, static_cast<long>(kSleepSlice.count())};
    ::syscall(SYS_futex, futex_word(r), FUTEX_WAIT, static_cast<std::uint32_t>(seen), &slice,
              nullptr, 0);
  }
  void wake(int r) const noexcept {
    ::syscall(SYS_futex, futex_word(r), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }

  Region region_;
  Layout layout_;
  int rank_;
  strata::detail::SpinPolicy spin_{};
  std::uint64_t step_ = 0;
  std::uint64_t chunks_ = 0;
  std::vector<int> group_ranks_;
};

}  // namespace strata::transport::shm
