// strata/algorithms/detail/partition.hpp — splitting a buffer into per-rank slices.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace strata::algorithms::detail {

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

/// Every rank's input, offset by `offset` elements of `element_bytes` each.
template <class Link>
std::vector<const void*> inputs_of(const Link& link, std::size_t offset,
                                   std::size_t element_bytes) {
  std::vector<const void*> inputs(static_cast<std::size_t>(link.size()));
  for (int r = 0; r < link.size(); ++r)
    inputs[static_cast<std::size_t>(r)] =
        static_cast<const std::byte*>(link.peer_call(r).send) + offset * element_bytes;
  return inputs;
}

}  // namespace strata::algorithms::detail
