// tests/support/sweep_report.hpp — a conformance sweep's summary as doctest checks.
#pragma once

#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "conformance_runner.hpp"

namespace strata::testing {

/// Fails the current test with every wrong case's message; a sweep that ran no case fails too.
inline void report(const SweepSummary& summary) {
  for (const std::string& message : summary.messages)
    FAIL_CHECK(message);
  CHECK_MESSAGE(summary.failed == 0, fmt::format("{} of {} cases failed, {} wrong elements in all",
                                                 summary.failed, summary.cases, summary.wrong));
  CHECK(summary.cases > 0);
}

}  // namespace strata::testing
