// tests/support/conformance_case.hpp — one conformance case (a collective call made by every rank
// of a group), its outcome, and the buffers it runs on: guarded storage per rank, and where each
// rank's input and output are in it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::testing {

using communicator::Collective;

/// One collective call made by every rank of a group.
struct CaseSpec {
  Collective kind = Collective::all_reduce;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;  // reducing collectives only
  int size = 1;                 // world size
  std::size_t count = 0;        // per-rank count; the block for all_gather and reduce_scatter
  int root = 0;                 // broadcast and reduce only
  bool in_place = false;
  bool empty_non_root_recv = false;  // reduce out of place: non-roots pass an empty output
};

inline std::string describe(const CaseSpec& spec) {
  std::string text = fmt::format("{}(type={}, ", to_string(spec.kind), to_string(spec.type));
  if (communicator::reduces(spec.kind))
    fmt::format_to(std::back_inserter(text), "op={}, ", to_string(spec.op));
  fmt::format_to(std::back_inserter(text), "count={}, size={}", spec.count, spec.size);
  if (communicator::has_root(spec.kind))
    fmt::format_to(std::back_inserter(text), ", root={}", spec.root);
  text += spec.in_place ? ", in place" : ", out of place";
  if (spec.empty_non_root_recv) text += ", empty recv on non-roots";
  text += ')';
  return text;
}

/// The outcome of one case: exceptions per rank, and the elements that were wrong.
struct CaseResult {
  std::string case_name;
  std::vector<std::string> exceptions;  // "rank r threw: ..."
  std::size_t wrong = 0;                // nccl-tests' #wrong, over every rank
  std::string first_wrong;              // the first wrong element by (rank, index)

  bool ok() const noexcept { return exceptions.empty() && wrong == 0; }

  std::string message() const {
    std::string text = case_name;
    for (const auto& e : exceptions)
      fmt::format_to(std::back_inserter(text), "\n  {}", e);
    if (wrong > 0)
      fmt::format_to(std::back_inserter(text), "\n  #wrong {}; first: {}", wrong, first_wrong);
    return text;
  }
};

/// Where rank r's buffers of one case are: its input (its send buffer, or its in-place buffer
/// or its block of it) and its output (its recv buffer, or its block of the in-place buffer).
template <Element T>
struct CaseLayout {
  std::vector<T*> in;
  std::vector<T*> out;
  std::vector<std::size_t> in_count;
  std::vector<std::size_t> out_count;
  std::vector<std::size_t> buffer_count;  // the in-place buffer (in place only)
};

namespace detail {

/// Wrong elements seen by one checking thread; keeps the first by (rank, index).
struct Tally {
  std::size_t wrong = 0;
  int first_rank = std::numeric_limits<int>::max();
  std::size_t first_index = 0;
  std::string first;

  template <class What>
  void add(int rank, std::size_t index, What&& what) {
    ++wrong;
    if (rank < first_rank || (rank == first_rank && index < first_index)) {
      first_rank = rank;
      first_index = index;
      first = fmt::format("rank {}, {}", rank, what());
    }
  }

  void merge(const Tally& other) {
    wrong += other.wrong;
    if (other.wrong > 0 && (other.first_rank < first_rank ||
                            (other.first_rank == first_rank && other.first_index < first_index))) {
      first_rank = other.first_rank;
      first_index = other.first_index;
      first = other.first;
    }
  }
};

inline constexpr std::byte kSentinel{0xa5};
inline constexpr std::size_t kGuardBytes = 64;

/// One rank's storage: two regions (send, recv), each with guard bytes on both sides. Reused
/// across cases; grows, never shrinks.
class RankStorage {
 public:
  /// Returns the start of region `which` (0: send, 1: recv) with room for `bytes`, and fills its
  /// guards with the sentinel.
  std::byte* region(int which, std::size_t bytes) {
    auto& region = regions_[which];
    if (!region.memory || region.capacity < bytes) {
      region.memory.reset();  // release before allocating: large cases hold GiBs
      region.memory = std::make_unique_for_overwrite<std::byte[]>(bytes + 2 * kGuardBytes);
      region.capacity = bytes;
    }
    region.bytes = bytes;
    std::byte* data = region.memory.get() + kGuardBytes;
    std::memset(data - kGuardBytes, static_cast<int>(kSentinel), kGuardBytes);
    std::memset(data + bytes, static_cast<int>(kSentinel), kGuardBytes);
    return data;
  }

  /// Number of overwritten guard bytes of region `which` (after `region(which, ...)`).
  std::size_t damaged_guards(int which) const {
    const auto& region = regions_[which];
    if (!region.memory) return 0;
    const std::byte* data = region.memory.get() + kGuardBytes;
    std::size_t damaged = 0;
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
      damaged += (data - kGuardBytes)[i] != kSentinel;
      damaged += data[region.bytes + i] != kSentinel;
    }
    return damaged;
  }

 private:
  struct Region {
    std::unique_ptr<std::byte[]> memory;
    std::size_t capacity = 0;
    std::size_t bytes = 0;
  };
  Region regions_[2];
};

/// An element made of sentinel bytes: what outputs hold before a collective writes them.
template <Element T>
T sentinel_value() {
  T value;
  std::memset(static_cast<void*>(&value), static_cast<int>(kSentinel), sizeof(T));
  return value;
}

/// Element range [begin, end) of part `part` of `total` split into `parts`.
inline std::pair<std::size_t, std::size_t> part_of(std::size_t total, int parts, int part) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(part);
  return {total / p * i + std::min(i, total % p), total / p * (i + 1) + std::min(i + 1, total % p)};
}

}  // namespace detail

}  // namespace strata::testing
