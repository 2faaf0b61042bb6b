// tests/support/sweep_plan.hpp — which conformance cases the collective tests run: the product of
// world sizes × element types × ops × roots × placements at small counts, and a plan at large
// counts whose extent STRATA_TEST_SWEEP chooses (`Sweep`).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <collective_reference/inputs.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

#include "conformance_case.hpp"

namespace strata::testing {

/// How much of the conformance product to run, from `STRATA_TEST_SWEEP`:
///   quick     the sanitizer presets: large counts capped at 2^20+3;
///   standard  the default (unset): small counts in full, large counts sampled;
///   full      the complete product at every count.
enum class Sweep { quick, standard, full };

inline Sweep sweep_from_environment() {
  const char* value = std::getenv("STRATA_TEST_SWEEP");  // NOLINT(concurrency-mt-unsafe)
  const std::string_view text = value == nullptr ? "" : value;
  if (text.empty() || text == "standard" || text == "default") return Sweep::standard;
  if (text == "quick") return Sweep::quick;
  if (text == "full") return Sweep::full;
  throw std::invalid_argument(
      fmt::format("STRATA_TEST_SWEEP='{}': use quick, standard (the default) or full", text));
}

inline std::string_view to_string(Sweep sweep) {
  switch (sweep) {
    case Sweep::quick:
      return "quick";
    case Sweep::standard:
      return "standard";
    case Sweep::full:
      return "full";
  }
  return "invalid";
}

inline constexpr DataType kAllDataTypes[] = {
    DataType::int8,    DataType::uint8,    DataType::int32,   DataType::int64,
    DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
inline constexpr std::size_t kSmallCounts[] = {0, 1, 7, 1023};
inline constexpr std::size_t kMediumCount = (std::size_t{1} << 20) + 3;
inline constexpr std::size_t kLargeCount = std::size_t{16} << 20;
inline constexpr int kMaxWorldSize = 8;

namespace detail {

inline std::vector<ReduceOp> ops_of(Collective kind) {
  if (!communicator::reduces(kind)) return {ReduceOp::sum};
  return {std::begin(kAllReduceOps), std::end(kAllReduceOps)};
}

/// Roots tried for every (size, count, type, op, placement): every rank for broadcast; the
/// first, middle and last rank for reduce.
inline std::vector<int> roots_of(Collective kind, int size) {
  if (kind == Collective::broadcast) {
    std::vector<int> roots(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      roots[static_cast<std::size_t>(r)] = r;
    return roots;
  }
  if (kind == Collective::reduce) {
    std::vector<int> roots{0};
    if (size / 2 != 0) roots.push_back(size / 2);
    if (size - 1 != size / 2 && size > 1) roots.push_back(size - 1);
    return roots;
  }
  return {0};
}

/// all_gather's and reduce_scatter's count is a per-rank block, so their buffers hold size·count
/// elements; at large counts the block is scaled to count / size to keep memory bounded.
inline std::size_t block_count(Collective kind, std::size_t count, int size) {
  const bool scattered = kind == Collective::all_gather || kind == Collective::reduce_scatter;
  if (!scattered || count < kMediumCount) return count;
  return count / static_cast<std::size_t>(size);
}

inline void add_product(std::vector<CaseSpec>& cases, Collective kind, std::size_t count) {
  for (int size = 1; size <= kMaxWorldSize; ++size)
    for (DataType type : kAllDataTypes)
      for (ReduceOp op : ops_of(kind))
        for (int root : roots_of(kind, size))
          for (bool in_place : {false, true}) {
            CaseSpec spec{kind, type, op, size, block_count(kind, count, size), root, in_place};
            // Reduce out of place: non-roots alternate between no output and an untouched one.
            spec.empty_non_root_recv =
                kind == Collective::reduce && !in_place && (root + size) % 2 == 1;
            cases.push_back(spec);
          }
}

}  // namespace detail

/// The conformance cases of collective `kind` at the small counts {0, 1, 7, 1023}: the full
/// product of world sizes 1..8 × element types × ops × roots × in/out of place.
inline std::vector<CaseSpec> small_count_cases(Collective kind) {
  std::vector<CaseSpec> cases;
  for (std::size_t count : kSmallCounts)
    detail::add_product(cases, kind, count);
  return cases;
}

/// Under the sanitizer presets (Sweep::quick) a fixed pseudo-random quarter of `cases` (a
/// hash of the index, not a stride, which would line up with the product's dimensions);
/// otherwise all of them. For communicators whose cases are latency-bound (TCP), where the
/// full product is slow under sanitizers.
inline std::vector<CaseSpec> thinned_when_quick(std::vector<CaseSpec> cases) {
  if (sweep_from_environment() != Sweep::quick) return cases;
  std::vector<CaseSpec> kept;
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (reference::mix64(i) % 4 == 0) kept.push_back(cases[i]);
  return kept;
}

/// Whether the quick sweep runs one op per element type at large counts: those of the reducing
/// collectives, whose ops make 8 × ops pairs.
inline bool reduce_ops_thinned(Collective kind) {
  return communicator::reduces(kind);
}

/// The conformance cases of collective `kind` at the large counts 2^20+3 and 16 Mi:
///   standard  every (op, type) once per count, world size rotating over 1..8 (offset by
///             `rotation`, so that sibling algorithms meet other sizes) and in/out of place
///             alternating, roots rotating; plus world size 8, float, sum, per count;
///   quick     at 2^20+3 only, and for the reducing collectives every element type with one
///             op, the ops taking turns (offset by `rotation`), so each op meets two types:
///             CI's time, and the sanitizers' (every pair runs at the small counts; the large
///             counts' chunking depends on the element size, not on the op);
///   full      the complete product, as at small counts.
/// all_gather and reduce_scatter use a block of count / size (see `block_count`).
inline std::vector<CaseSpec> large_count_cases(Collective kind, Sweep sweep, int rotation = 0) {
  std::vector<std::size_t> counts{kMediumCount};
  if (sweep != Sweep::quick) counts.push_back(kLargeCount);
  std::vector<CaseSpec> cases;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    if (sweep == Sweep::full) {
      detail::add_product(cases, kind, counts[c]);
      continue;
    }
    int k = 0;
    const auto ops = detail::ops_of(kind);
    for (std::size_t o = 0; o < ops.size(); ++o)
      for (std::size_t t = 0; t < std::size(kAllDataTypes); ++t) {
        const ReduceOp op = ops[o];
        const DataType type = kAllDataTypes[t];
        if (sweep == Sweep::quick && reduce_ops_thinned(kind) &&
            (t + static_cast<std::size_t>(rotation)) % ops.size() != o) {
          ++k;
          continue;
        }
        const int rot = k + rotation + 3 * static_cast<int>(c);
        const int size = 1 + rot % kMaxWorldSize;
        CaseSpec spec{kind, type, op, size, detail::block_count(kind, counts[c], size)};
        spec.in_place = (k + k / kMaxWorldSize + static_cast<int>(c)) % 2 == 1;
        spec.root = communicator::has_root(kind) ? (2 * k + 1 + static_cast<int>(c)) % size : 0;
        spec.empty_non_root_recv = kind == Collective::reduce && !spec.in_place && k % 3 == 0;
        cases.push_back(spec);
        ++k;
      }
    CaseSpec eight{kind, DataType::float32, ReduceOp::sum, kMaxWorldSize,
                   detail::block_count(kind, counts[c], kMaxWorldSize)};
    eight.in_place = c % 2 == 1;
    eight.root = communicator::has_root(kind) ? kMaxWorldSize - 1 - static_cast<int>(c) : 0;
    cases.push_back(eight);
  }
  return cases;
}

}  // namespace strata::testing
