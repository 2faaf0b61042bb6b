// strata/fusion/detail/same_gradients.hpp — the first step's check that every rank registered
// the same gradient list and bucket options (GradientBuckets).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/error.hpp>
#include <strata/fusion/bucket_plan.hpp>

namespace strata::fusion::detail {

// What the first step exchanges before the gradients: the count and the three options.
inline constexpr std::size_t kHeader = 4;

/// Every rank compares its list (and options) with rank 0's; all agree on the first
/// difference, so all throw, naming the same gradient.
template <class Comm>
void check_same_gradients(Comm& comm, const std::vector<GradientSpec>& specs,
                          const BucketOptions& options) {
  const int rank = comm.rank();
  std::vector<std::int64_t> mine;
  mine.reserve(kHeader + 2 * specs.size());
  mine.push_back(static_cast<std::int64_t>(specs.size()));
  mine.push_back(static_cast<std::int64_t>(options.bucket_bytes));
  mine.push_back(static_cast<std::int64_t>(options.first_bucket_bytes));
  mine.push_back(static_cast<std::int64_t>(options.compression));
  for (const GradientSpec& spec : specs) {
    mine.push_back(static_cast<std::int64_t>(spec.type));
    mine.push_back(static_cast<std::int64_t>(spec.count));
  }
  std::int64_t rank0_size = mine[0];
  comm.broadcast(std::span(&rank0_size, 1), 0);
  std::vector<std::int64_t> rank0(kHeader + 2 * static_cast<std::size_t>(rank0_size));
  if (rank == 0) rank0 = mine;
  comm.broadcast(std::span(rank0), 0);

  constexpr std::int64_t kSame = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kOptions = -1;
  std::int64_t differs = kSame;
  if (!std::equal(rank0.begin() + 1, rank0.begin() + kHeader, mine.begin() + 1)) {
    differs = kOptions;
  } else {
    const std::size_t common = std::min(specs.size(), static_cast<std::size_t>(rank0_size));
    for (std::size_t i = 0; i < common && differs == kSame; ++i) {
      if (rank0[kHeader + 2 * i] != mine[kHeader + 2 * i] ||
          rank0[kHeader + 1 + 2 * i] != mine[kHeader + 1 + 2 * i]) {
        differs = static_cast<std::int64_t>(i);
      }
    }
    if (differs == kSame && specs.size() != static_cast<std::size_t>(rank0_size)) {
      differs = static_cast<std::int64_t>(common);
    }
  }
  // The smallest over the ranks, gathered rather than all-reduced: no int64 kernels.
  std::vector<std::int64_t> all_differ(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::int64_t>(&differs, 1), std::span(all_differ));
  differs = *std::min_element(all_differ.begin(), all_differ.end());
  if (differs == kSame) return;

  if (differs == kOptions) {
    throw MismatchError(rank, "fusion::GradientBuckets",
                        "the bucket options differ between ranks (bucket_bytes, "
                        "first_bucket_bytes, compression)",
                        "give every rank the same BucketOptions");
  }
  const auto i = static_cast<std::size_t>(differs);
  const auto describe = [](const std::vector<std::int64_t>& list, std::size_t at) {
    if (at >= static_cast<std::size_t>(list[0])) return std::string("no such gradient");
    return fmt::format("{}[{}]", to_string(static_cast<DataType>(list[kHeader + 2 * at])),
                       list[kHeader + 1 + 2 * at]);
  };
  throw MismatchError(
      rank, "fusion::GradientBuckets",
      fmt::format("the ranks registered different gradients: gradient {} is {} on rank 0 "
                  "and {} here ({} gradients on rank 0, {} here)",
                  i, describe(rank0, i), describe(mine, i), rank0_size, specs.size()),
      "register the same gradients, in the same order, on every rank");
}

}  // namespace strata::fusion::detail
