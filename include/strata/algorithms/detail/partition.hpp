// strata/algorithms/detail/partition.hpp — per-rank slices (core/detail/slices.hpp) and inputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include <strata/core/detail/slices.hpp>

namespace strata::algorithms::detail {

using strata::detail::Slice;
using strata::detail::slice_of;

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
