// strata/transport/shm/collectives.hpp — every collective over a shared region (group.hpp).
//
// Ranks in separate processes cannot read each other's buffers, so each stages what its peers
// need in its own block and publishes a step; the peers then work straight from the staged
// bytes, in the in-process algorithms' shape (AllReduceScatterGather):
//   small calls      (a rank's contribution fits Layout::kSmallBytes) one step: every rank
//                    stages its data and descriptor in its box, waits for all, and reads what
//                    it needs; an all-reduce reduces all n staged inputs itself, in rank order.
//   all_reduce       per chunk of slot_bytes: reduce the own slice from the n staged copies (the
//                    own input in place) into the output and the own staging buffer, and stage
//                    the next chunk's slices other ranks reduce; step; copy the other slices
//                    out (a step per chunk, after one that stages the first).
//                    Where every rank's buffers lie in its arena (arena.hpp), nothing is
//                    staged: post the buffers; step; per chunk, reduce the own slice straight
//                    from the peers' inputs and write it into every rank's output; step.
//   reduce           the same, only the root copies out.
//   broadcast        per chunk: the root stages, the others copy out; one step.
//   all_gather       per chunk of the block: every rank stages its block, all copy out.
//   reduce_scatter   per chunk: stage the pieces of the other ranks' blocks; each rank reduces
//                    its own block's piece.
// A call's first step also publishes its descriptor, which every rank compares before reading
// any data: a disagreement is a MismatchError on every rank. Each element is reduced once, in
// rank order, by one kernel: all ranks end with the same bits, as AllReduceReduceToOne's.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <strata/core/collective.hpp>
#include <strata/core/detail/slices.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/transport/shm/group.hpp>

namespace strata::transport::shm {

namespace detail {

inline void copy_bytes(void* to, const void* from, std::size_t bytes) noexcept {
  if (bytes != 0 && to != from) std::memcpy(to, from, bytes);
}

inline const std::byte* bytes_of(const void* p) noexcept {
  return static_cast<const std::byte*>(p);
}
inline std::byte* bytes_of(void* p) noexcept {
  return static_cast<std::byte*>(p);
}

/// What each rank stages of `call` in all: its contribution.
inline std::size_t contribution_bytes(const CollectiveCall& call, int size) noexcept {
  const std::size_t bytes = call.count * size_of(call.type);
  if (call.kind == Collective::reduce_scatter) return bytes * static_cast<std::size_t>(size);
  return call.kind == Collective::barrier ? 0 : bytes;
}

/// Raises MismatchError unless every rank posted the same calls, as `posted(rank)` reads them.
/// Every rank compares the same descriptors, so all raise or none does.
template <class Posted>
void check_agreement(const Group& group, const CollectiveCall& user, Posted posted) {
  const auto first = posted(0);
  for (int r = 1; r < group.size(); ++r) {
    const auto other = posted(r);
    if (first && other && agrees(first->call, other->call) && agrees(first->user, other->user))
      continue;
    auto text = [](const std::optional<Group::Posted>& call) {
      return call ? describe(call->user) : std::string("a call this version does not know");
    };
    throw MismatchError(
        group.group_rank(group.rank()), to_string(user.kind),
        fmt::format("ranks disagree: rank {} called {} but rank {} called {}", group.group_rank(0),
                    text(first), group.group_rank(r), text(other)));
  }
}

/// The call's first step: posts the descriptors with what was staged, waits for every rank,
/// compares.
template <class Watch>
void open_call(Group& group, const CollectiveCall& call, const CollectiveCall& user,
               std::uint64_t number, Watch& watch) {
  group.post(call, user, number);
  group.publish();
  group.wait_all(group.step(), watch);
  check_agreement(group, user, [&](int r) { return group.posted(r, number); });
}

/// Publishes what this rank staged of a chunk and waits for every rank's: the call's first
/// chunk opens the call (its descriptors are compared).
template <class Watch>
void exchange_chunk(Group& group, bool first, const CollectiveCall& call,
                    const CollectiveCall& user, std::uint64_t number, Watch& watch) {
  if (first) {
    open_call(group, call, user, number, watch);
    return;
  }
  group.publish();
  group.wait_all(group.step(), watch);
}

// How much of each peer's staged data a small call prefetches at once.
inline constexpr std::size_t kPrefetchBytes = 2048;

// Whether rank r of a small call reads what rank q staged.
inline bool reads_from(const CollectiveCall& call, int r, int q) noexcept {
  switch (call.kind) {
    case Collective::barrier:
      return false;
    case Collective::broadcast:
      return q == call.root;
    case Collective::reduce:
      return r == call.root;
    default:
      return true;
  }
}

// One step, through the boxes (Group::post_small): what a peer waits on, the descriptors it
// compares and the data it reads come on the same cache lines.
template <class Watch>
void run_small(Group& group, const CollectiveCall& call, const CollectiveCall& user, Watch& watch) {
  const int n = group.size();
  const int r = group.rank();
  const std::size_t bytes = call.count * size_of(call.type);
  const std::uint64_t parity = group.step() + 1;  // the step that publishes what is staged
  std::byte* staged = group.small(r, parity);
  const bool stages =
      call.kind != Collective::barrier && (call.kind != Collective::broadcast || r == call.root);
  if (stages) copy_bytes(staged, call.send, contribution_bytes(call, n));
  group.post_small(call, user);
  group.publish_small();
  group.wait_all_small(parity, watch);
  // What this rank reads of its peers' boxes travels while the descriptors are compared.
  const std::size_t offset =
      call.kind == Collective::reduce_scatter ? static_cast<std::size_t>(r) * bytes : 0;
  for (int q = 0; q < n; ++q) {
    if (q == r || !reads_from(call, r, q)) continue;
    const std::byte* from = group.small(q, parity) + offset;
    for (std::size_t at = 0; at < std::min(bytes, kPrefetchBytes); at += 64)
      __builtin_prefetch(from + at);
  }
  check_agreement(group, user, [&](int q) { return group.posted_small(q, parity); });
  if (bytes == 0) return;
  // Most groups are a host's few ranks: their inputs' addresses stay on the stack.
  constexpr std::size_t kOnStack = 16;
  std::array<const void*, kOnStack> few{};
  std::vector<const void*> many;
  if (static_cast<std::size_t>(n) > kOnStack) many.resize(static_cast<std::size_t>(n));
  const std::span<const void*> inputs =
      many.empty() ? std::span(few).first(static_cast<std::size_t>(n)) : std::span(many);
  switch (call.kind) {
    case Collective::reduce:
      if (r != call.root) return;
      [[fallthrough]];
    case Collective::all_reduce:
      for (int q = 0; q < n; ++q)
        inputs[static_cast<std::size_t>(q)] = group.small(q, parity);
      kernels_of(call).reduce_n(call.recv, inputs.data(), inputs.size(), call.count, call.op);
      return;
    case Collective::reduce_scatter:
      for (int q = 0; q < n; ++q)
        inputs[static_cast<std::size_t>(q)] =
            group.small(q, parity) + static_cast<std::size_t>(r) * bytes;
      kernels_of(call).reduce_n(call.recv, inputs.data(), inputs.size(), call.count, call.op);
      return;
    case Collective::broadcast:
      copy_bytes(call.recv, r == call.root ? call.send : group.small(call.root, parity), bytes);
      return;
    case Collective::all_gather:
      for (int q = 0; q < n; ++q)
        copy_bytes(bytes_of(call.recv) + static_cast<std::size_t>(q) * bytes,
                   q == r ? call.send : group.small(q, parity), bytes);
      return;
    case Collective::barrier:
      return;
  }
}

// all_reduce and reduce, chunk by chunk (see the file comment). `opened`: the call's first step
// has been taken (run_all_reduce_in_arenas), so the first chunk is a plain step.
//
// One step per chunk: in step c a rank reduces its slice of chunk c and stages chunk c+1 in its
// other buffer, then (after the step) copies the peers' results of chunk c out. That other buffer
// held chunk c-1, whose result slice the peers may still be copying out during step c; staging
// writes only the other slices of it, so every slice of a chunk has the same place in a buffer,
// whatever the chunk's size (a chunk's slices fit: it has `slice_lines` cache lines per rank).
template <class Watch>
void run_reduction(Group& group, const CollectiveCall& call, const CollectiveCall& user,
                   std::uint64_t number, Watch& watch, bool opened = false) {
  const int n = group.size();
  const int r = group.rank();
  const std::size_t element = size_of(call.type);
  const std::size_t slice_lines = group.slot_bytes() / 64 / static_cast<std::size_t>(n);
  const std::size_t per_chunk = slice_lines * static_cast<std::size_t>(n) * (64 / element);
  const std::size_t chunks = (call.count + per_chunk - 1) / per_chunk;
  const bool all = call.kind == Collective::all_reduce;
  const bool copies_out = all || r == call.root;
  const std::byte* in = bytes_of(call.send);
  std::byte* out = bytes_of(call.recv);
  const ReduceKernels& kernels = kernels_of(call);
  auto slice = [&](std::size_t c, int q) {
    return strata::detail::slice_of(std::min(per_chunk, call.count - c * per_chunk), element, n, q);
  };
  auto staged = [&](int q, std::uint64_t parity, int slice_rank) {
    return group.chunk(q, parity) + static_cast<std::size_t>(slice_rank) * slice_lines * 64;
  };
  auto stage = [&](std::size_t c, std::uint64_t parity) {  // the slices the peers reduce
    for (int q = 0; q < n; ++q) {
      const auto s = slice(c, q);
      if (q != r)
        copy_bytes(staged(r, parity, q), in + (c * per_chunk + s.begin) * element,
                   s.size() * element);
    }
  };
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  std::uint64_t parity = group.next_chunk();
  stage(0, parity);
  exchange_chunk(group, !opened, call, user, number, watch);
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t base = c * per_chunk;
    const auto own = slice(c, r);
    if (own.size() != 0) {
      for (int q = 0; q < n; ++q)
        inputs[static_cast<std::size_t>(q)] =
            q == r ? in + (base + own.begin) * element : staged(q, parity, r);
      std::byte* target = copies_out ? out + (base + own.begin) * element : staged(r, parity, r);
      kernels.reduce_n(target, inputs.data(), inputs.size(), own.size(), call.op);
      // A reduce's root reads no buffer of its own.
      if (all) copy_bytes(staged(r, parity, r), target, own.size() * element);
    }
    const std::uint64_t reduced = parity;
    if (c + 1 < chunks) {
      parity = group.next_chunk();
      stage(c + 1, parity);
    }
    group.publish();
    group.wait_all(group.step(), watch);
    if (!copies_out) continue;
    for (int q = 0; q < n; ++q) {
      const auto s = slice(c, q);
      if (q != r)
        copy_bytes(out + (base + s.begin) * element, staged(q, reduced, q), s.size() * element);
    }
  }
}

// An all-reduce in a group with arenas: the call's first step posts where each rank's buffers
// lie; in the arenas on every rank, the threads' algorithm (AllReduceScatterGather) runs on
// them in place, else the staged one.
template <class Watch>
void run_all_reduce_in_arenas(Group& group, const CollectiveCall& call, const CollectiveCall& user,
                              std::uint64_t number, Watch& watch) {
  const int n = group.size();
  const int r = group.rank();
  const std::size_t element = size_of(call.type);
  const std::size_t bytes = call.count * element;
  // Beside the descriptors, which open_call posts (they do not overlap).
  group.post_buffers(
      number, {group.arena_offset_of(call.send, bytes), group.arena_offset_of(call.recv, bytes)});
  open_call(group, call, user, number, watch);
  std::vector<Group::Buffers> buffers(static_cast<std::size_t>(n));
  bool in_arenas = true;
  for (int q = 0; q < n; ++q) {
    const Group::Buffers posted = group.posted_buffers(q, number);
    for (const std::uint64_t offset : {posted.send, posted.recv}) {
      if (offset == Group::kNotInArena) {
        in_arenas = false;
      } else if (!group.fits_arena(offset, bytes)) {
        // Every rank reads the same posts, so every rank raises this.
        throw PeerFailureError(
            group.group_rank(r), to_string(user.kind),
            RootCause{group.group_rank(q),
                      fmt::format("rank {} posted a buffer of {} bytes at offset {} of an arena "
                                  "of {}",
                                  group.group_rank(q), bytes, offset, group.arena_bytes())},
            "every rank of a host must run the same strata version and options");
      }
    }
    buffers[static_cast<std::size_t>(q)] = posted;
  }
  if (!in_arenas) {
    run_reduction(group, call, user, number, watch, /*opened=*/true);
    return;
  }
  auto input = [&](int q, std::size_t at) -> const std::byte* {
    return group.arena(q) + buffers[static_cast<std::size_t>(q)].send + at;
  };
  // Chunk by chunk, each rank reduces its slice straight from the peers' inputs and writes the
  // result into every rank's output while it is in cache. In place, slice q of a buffer is read
  // and then written by rank q alone; after the last step nobody touches another's buffers.
  const std::size_t per_chunk = group.slot_bytes() / element;
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  for (std::size_t base = 0; base < call.count; base += per_chunk) {
    const std::size_t m = std::min(per_chunk, call.count - base);
    const auto own = strata::detail::slice_of(m, element, n, r);
    if (own.size() == 0) continue;
    const std::size_t at = (base + own.begin) * element;
    for (int q = 0; q < n; ++q)
      inputs[static_cast<std::size_t>(q)] = input(q, at);
    std::byte* result = bytes_of(call.recv) + at;
    kernels_of(call).reduce_n(result, inputs.data(), inputs.size(), own.size(), call.op);
    for (int q = 0; q < n; ++q)
      if (q != r)
        copy_bytes(group.arena(q) + buffers[static_cast<std::size_t>(q)].recv + at, result,
                   own.size() * element);
  }
  group.publish();
  group.wait_all(group.step(), watch);
}

template <class Watch>
void run_broadcast(Group& group, const CollectiveCall& call, const CollectiveCall& user,
                   std::uint64_t number, Watch& watch) {
  const int r = group.rank();
  const std::size_t element = size_of(call.type);
  const std::size_t per_chunk = group.slot_bytes() / element;
  for (std::size_t base = 0; base < call.count; base += per_chunk) {
    const std::size_t bytes = std::min(per_chunk, call.count - base) * element;
    const std::uint64_t parity = group.next_chunk();
    const std::size_t offset = base * element;
    if (r == call.root) copy_bytes(group.chunk(r, parity), bytes_of(call.send) + offset, bytes);
    exchange_chunk(group, base == 0, call, user, number, watch);
    copy_bytes(bytes_of(call.recv) + offset,
               r == call.root ? bytes_of(call.send) + offset : group.chunk(call.root, parity),
               bytes);
  }
}

template <class Watch>
void run_all_gather(Group& group, const CollectiveCall& call, const CollectiveCall& user,
                    std::uint64_t number, Watch& watch) {
  const int n = group.size();
  const int r = group.rank();
  const std::size_t element = size_of(call.type);
  const std::size_t per_chunk = group.slot_bytes() / element;
  const std::size_t block = call.count * element;
  for (std::size_t base = 0; base < call.count; base += per_chunk) {
    const std::size_t bytes = std::min(per_chunk, call.count - base) * element;
    const std::uint64_t parity = group.next_chunk();
    const std::size_t offset = base * element;
    copy_bytes(group.chunk(r, parity), bytes_of(call.send) + offset, bytes);
    exchange_chunk(group, base == 0, call, user, number, watch);
    for (int q = 0; q < n; ++q)
      copy_bytes(bytes_of(call.recv) + static_cast<std::size_t>(q) * block + offset,
                 q == r ? bytes_of(call.send) + offset : group.chunk(q, parity), bytes);
  }
}

template <class Watch>
void run_reduce_scatter(Group& group, const CollectiveCall& call, const CollectiveCall& user,
                        std::uint64_t number, Watch& watch) {
  const int n = group.size();
  const int r = group.rank();
  const std::size_t element = size_of(call.type);
  // The slot holds one piece of every rank's block.
  const std::size_t per_piece = group.slot_bytes() / (static_cast<std::size_t>(n) * element);
  const std::size_t piece_bytes = per_piece * element;
  const std::size_t block = call.count * element;
  const std::byte* in = bytes_of(call.send);
  const ReduceKernels& kernels = kernels_of(call);
  std::vector<const void*> inputs(static_cast<std::size_t>(n));
  for (std::size_t base = 0; base < call.count; base += per_piece) {
    const std::size_t m = std::min(per_piece, call.count - base);
    const std::uint64_t parity = group.next_chunk();
    const std::size_t offset = base * element;
    std::byte* own_slot = group.chunk(r, parity);
    for (int q = 0; q < n; ++q)
      if (q != r)
        copy_bytes(own_slot + static_cast<std::size_t>(q) * piece_bytes,
                   in + static_cast<std::size_t>(q) * block + offset, m * element);
    exchange_chunk(group, base == 0, call, user, number, watch);
    for (int q = 0; q < n; ++q)
      inputs[static_cast<std::size_t>(q)] =
          q == r ? in + static_cast<std::size_t>(r) * block + offset
                 : group.chunk(q, parity) + static_cast<std::size_t>(r) * piece_bytes;
    kernels.reduce_n(bytes_of(call.recv) + offset, inputs.data(), inputs.size(), m, call.op);
  }
}

}  // namespace detail

/// Runs `call` on this rank of `group`; `number` is the call's number, equal on every rank.
/// `watch` looks at the peers and the deadline while the call waits (Group::wait_for). `user`:
/// the call the user made, of which `call` is a stage, compared across ranks with it.
/// @throws MismatchError when the ranks posted different calls; what `watch` throws.
template <class Watch>
void run(Group& group, const CollectiveCall& call, const CollectiveCall& user, std::uint64_t number,
         Watch& watch) {
  if (detail::contribution_bytes(call, group.size()) <= Layout::kSmallBytes) {
    detail::run_small(group, call, user, watch);
    return;
  }
  switch (call.kind) {
    case Collective::all_reduce:
      if (group.arena_bytes() > 0) {
        detail::run_all_reduce_in_arenas(group, call, user, number, watch);
        return;
      }
      detail::run_reduction(group, call, user, number, watch);
      return;
    case Collective::reduce:
      detail::run_reduction(group, call, user, number, watch);
      return;
    case Collective::broadcast:
      detail::run_broadcast(group, call, user, number, watch);
      return;
    case Collective::all_gather:
      detail::run_all_gather(group, call, user, number, watch);
      return;
    case Collective::reduce_scatter:
      detail::run_reduce_scatter(group, call, user, number, watch);
      return;
    case Collective::barrier:  // contributes nothing: small
      return;
  }
}

/// Runs `call` as the user made it.
template <class Watch>
void run(Group& group, const CollectiveCall& call, std::uint64_t number, Watch& watch) {
  run(group, call, call, number, watch);
}

}  // namespace strata::transport::shm
