// strata/transport/shm/arena.hpp — carving a rank's arena of the region (Layout::arena_bytes)
// into the buffers its user asks for: first fit over the free ranges, neighbours merged again
// on release.
//
// The arena is what lets co-located processes run the threads' all-reduce: a peer reads a
// buffer in it where its owner left it, with no staging copy (collectives.hpp). Any thread may
// allocate and release; the arena keeps its group, and so the mapping, alive for as long as a
// buffer of it exists.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <strata/transport/shm/group.hpp>

namespace strata::transport::shm {

class Arena {
 public:
  /// Every buffer starts on a cache line of its own.
  static constexpr std::size_t kAlignment = 64;

  explicit Arena(std::shared_ptr<const Group> group)
      : group_(std::move(group)), data_(group_->arena(group_->rank())) {
    if (group_->arena_bytes() > 0) free_.emplace(0, group_->arena_bytes());
  }

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return group_->arena_bytes(); }

  /// The offset of `bytes` (at least one cache line) nobody else holds, or nullopt when no free
  /// range is that large.
  std::optional<std::size_t> allocate(std::size_t bytes) {
    const std::size_t rounded = round_up(bytes);
    if (rounded < bytes) return std::nullopt;  // overflowed
    std::lock_guard lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < rounded) continue;
      const auto [offset, length] = *it;
      free_.erase(it);
      if (length > rounded) free_.emplace(offset + rounded, length - rounded);
      used_.emplace(offset, rounded);
      return offset;
    }
    return std::nullopt;
  }

  /// Gives back what `allocate` returned at `offset`.
  void release(std::size_t offset) noexcept {
    std::lock_guard lock(mutex_);
    const auto used = used_.find(offset);
    if (used == used_.end()) return;
    std::size_t begin = offset;
    std::size_t length = used->second;
    used_.erase(used);
    const auto next = free_.lower_bound(begin);
    if (next != free_.end() && next->first == begin + length) {
      length += next->second;
      free_.erase(next);
    }
    const auto after = free_.lower_bound(begin);
    if (after != free_.begin()) {
      const auto before = std::prev(after);
      if (before->first + before->second == begin) {
        begin = before->first;
        length += before->second;
        free_.erase(before);
      }
    }
    free_.emplace(begin, length);
  }

  /// Bytes that no buffer holds.
  std::size_t free_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t bytes = 0;
    for (const auto& [offset, length] : free_)
      bytes += length;
    return bytes;
  }

 private:
  static std::size_t round_up(std::size_t bytes) noexcept {
    const std::size_t at_least = bytes == 0 ? 1 : bytes;
    return (at_least + kAlignment - 1) / kAlignment * kAlignment;
  }

  std::shared_ptr<const Group> group_;
  std::byte* data_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::size_t> free_;  // offset → bytes
  std::map<std::size_t, std::size_t> used_;  // offset → bytes
};

}  // namespace strata::transport::shm
