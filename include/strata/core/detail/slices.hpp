// strata/core/detail/slices.hpp — splitting a buffer into per-rank slices on cache-line bounds.
//
// Below the algorithms and the transports, which both cut buffers this way (the shared-memory
// transport's collectives as the in-process algorithms do).
#pragma once

#include <algorithm>
#include <cstddef>

namespace strata::detail {

/// Element range [begin, end) of slice `index` when `count` elements are split into `parts`
/// nearly equal slices whose boundaries fall on 64-byte multiples (so ranks writing adjacent
/// slices do not share cache lines). Slices may be empty when count is small.
struct Slice {
  std::size_t begin;
  std::size_t end;
  std::size_t size() const noexcept { return end - begin; }
};

inline Slice slice_of(std::size_t count, std::size_t element_bytes, int parts, int index) {
  const std::size_t line = std::max<std::size_t>(1, 64 / element_bytes);
  const std::size_t lines = (count + line - 1) / line;
  const auto n = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  auto boundary = [&](std::size_t k) { return std::min(count, (lines * k / n) * line); };
  return {boundary(i), boundary(i + 1)};
}

}  // namespace strata::detail
