// tests/support/conformance_checks.hpp — the checks of one conformance case, nccl-tests style:
// every rank's output against the one collective reference (tools/reference/: its inputs, its
// reference values, and its tolerances for floating point, stated in reference.hpp), and beyond
// the outputs: out-of-place inputs unchanged, outputs a collective must not touch (reduce on
// non-roots) untouched, and all_reduce/broadcast/all_gather outputs bit-identical on every rank
// (the determinism promise). Integers, min and max, copies and untouched buffers are exact.
#pragma once

#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <collective_reference/elements.hpp>
#include <collective_reference/inputs.hpp>
#include <collective_reference/reference.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>

#include "conformance_case.hpp"

namespace strata::testing {

/// The largest world size the checks handle (a reduction's inputs are kept on the stack).
inline constexpr int kMaxConformanceRanks = 64;

/// Checks one finished case, a part of its index space at a time, so that the rank threads can
/// share the work; counts wrong elements into `tally`.
template <Element T>
class CaseChecker {
 public:
  CaseChecker(const CaseSpec& spec, const CaseLayout<T>& layout, detail::Tally& tally)
      : spec_(spec),
        layout_(layout),
        tally_(tally),
        input_of_(spec.op, spec.size),
        n_(spec.size),
        sentinel_(detail::sentinel_value<T>()) {}

  /// Checks part `part` (of `spec.size` parts) of the case's elements on every rank.
  void check_part(int part) {
    const std::size_t count = spec_.count;
    const bool scattered =
        spec_.kind == Collective::all_gather || spec_.kind == Collective::reduce_scatter;
    const auto [begin, end] =
        detail::part_of(scattered ? static_cast<std::size_t>(n_) * count : count, n_, part);
    switch (spec_.kind) {
      case Collective::all_reduce:
        return check_all_reduce(begin, end);
      case Collective::broadcast:
        return check_broadcast(begin, end);
      case Collective::reduce:
        return check_reduce(begin, end);
      case Collective::all_gather:
        return check_all_gather(begin, end);
      case Collective::reduce_scatter:
        return check_reduce_scatter(begin, end);
      case Collective::barrier:
        return;
    }
  }

  /// Reports the guard bytes around `rank`'s buffers that the call overwrote.
  void check_guards(int rank, const detail::RankStorage& storage) {
    for (int which = 0; which < (spec_.in_place ? 1 : 2); ++which) {
      if (const std::size_t damaged = storage.damaged_guards(which))
        tally_.add(rank, std::numeric_limits<std::size_t>::max(), [&] {
          return fmt::format("{} guard bytes around its {} buffer were overwritten", damaged,
                             spec_.in_place ? "in-place"
                             : which == 0   ? "send"
                                            : "recv");
        });
    }
  }

 private:
  T input(int q, std::size_t i) const { return input_of_(q, i); }

  reference::Expected<T> expected(std::size_t i) {
    return reference::expected_reduction<T>(gather_inputs(i), spec_.op);
  }

  // Out of place, rank q's input at `i` must still be `expected`.
  [[gnu::always_inline]] void check_input(int q, std::size_t i, T expected) {
    if (spec_.in_place) return;
    const T got = layout_.in[static_cast<std::size_t>(q)][i];
    if (!reference::same_bits(got, expected))
      tally_.add(q, i, [&] {
        return fmt::format("send[{}] was modified: {} instead of {}", i,
                           reference::format_value(got), reference::format_value(expected));
      });
  }

  // Every rank's input at `i`, each checked for being unchanged.
  [[gnu::always_inline]] std::span<const T> gather_inputs(std::size_t i) {
    for (int q = 0; q < n_; ++q) {
      inputs_[q] = input(q, i);
      check_input(q, i, inputs_[q]);
    }
    return std::span<const T>(inputs_, static_cast<std::size_t>(n_));
  }

  void report(int q, std::size_t i, T got, const std::string& expected, std::string_view why) {
    tally_.add(q, i, [&] {
      return fmt::format("output[{}]: got {}, expected {}{}", i, reference::format_value(got),
                         expected, why);
    });
  }

  // Every rank's output at `i` must be acceptable; ranks other than 0 must also have rank 0's
  // bits.
  template <class Acceptable, class ExpectedText>
  [[gnu::always_inline]] void check_all_ranks(std::size_t i, const Acceptable& acceptable,
                                              const ExpectedText& expected_text) {
    const T first = layout_.out[0][i];
    const bool first_ok = acceptable(first);
    if (!first_ok) report(0, i, first, expected_text(), "");
    for (int q = 1; q < n_; ++q) {
      const T got = layout_.out[static_cast<std::size_t>(q)][i];
      if (reference::same_bits(got, first)) {
        if (!first_ok) report(q, i, got, expected_text(), "");
      } else {
        report(q, i, got, expected_text(),
               fmt::format(" (and rank 0 has {}: results must be bit-identical on every rank)",
                           reference::format_value(first)));
      }
    }
  }

  void check_all_reduce(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const auto want = expected(i);
      check_all_ranks(
          i, [&](T got) { return reference::matches(got, want); },
          [&] { return reference::describe(want); });
    }
  }

  void check_broadcast(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const T want = input(spec_.root, i);
      if (!spec_.in_place)
        for (int q = 0; q < n_; ++q)
          check_input(q, i, input(q, i));
      check_all_ranks(
          i, [&](T got) { return reference::same_bits(got, want); },
          [&] { return reference::format_value(want); });
    }
  }

  void check_reduce(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const auto want = expected(i);
      for (int q = 0; q < n_; ++q) {
        const auto uq = static_cast<std::size_t>(q);
        if (q == spec_.root) {
          const T got = layout_.out[uq][i];
          if (!reference::matches(got, want)) report(q, i, got, reference::describe(want), "");
        } else if (spec_.in_place) {
          const T got = layout_.out[uq][i];
          if (!reference::same_bits(got, inputs_[q]))
            report(q, i, got, reference::format_value(inputs_[q]),
                   " (a non-root's buffer must be untouched)");
        } else if (layout_.out_count[uq] > 0) {
          const T got = layout_.out[uq][i];
          if (!reference::same_bits(got, sentinel_))
            report(q, i, got, reference::format_value(sentinel_),
                   " (a non-root's recv must be untouched)");
        }
      }
    }
  }

  void check_all_gather(std::size_t begin, std::size_t end) {
    const std::size_t count = spec_.count;
    for (std::size_t j = begin; j < end; ++j) {
      const int block = static_cast<int>(j / count);
      const std::size_t i = j % count;
      const T want = input(block, i);
      check_input(block, i, want);
      check_all_ranks(
          j, [&](T got) { return reference::same_bits(got, want); },
          [&] { return reference::format_value(want); });
    }
  }

  void check_reduce_scatter(std::size_t begin, std::size_t end) {
    const std::size_t count = spec_.count;
    for (std::size_t j = begin; j < end; ++j) {
      const auto want = expected(j);
      const auto owner = j / count;
      const T got = layout_.out[owner][j - owner * count];
      if (!reference::matches(got, want))
        report(static_cast<int>(owner), j - owner * count, got, reference::describe(want), "");
    }
  }

  const CaseSpec& spec_;
  const CaseLayout<T>& layout_;
  detail::Tally& tally_;
  reference::Inputs<T> input_of_;
  int n_;
  T sentinel_;
  T inputs_[kMaxConformanceRanks];
};

}  // namespace strata::testing
