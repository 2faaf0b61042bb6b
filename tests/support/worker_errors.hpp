// tests/support/worker_errors.hpp — how the worker processes of the multi-process tests
// (tcp_worker.cpp, nccl_worker.cpp) end on an error: they print "error KIND MILLISECONDS
// MESSAGE" (the time since `began`, when the failing call started) and exit with a code per
// class, which the tests check.
#pragma once

#include <chrono>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::testing {

/// Runs `body` (returning the exit code); a strata error ends it with 3 (PeerFailureError),
/// 4 (TimeoutError), 5 (MismatchError), 6 (ConfigurationError) or 7 (anything else).
template <class Body>
int exit_code_of(std::chrono::steady_clock::time_point& began, Body&& body) {
  const auto report = [&](const char* kind, int code, const std::exception& error) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - began)
                        .count();
    fmt::print("error {} {} {}\n", kind, ms, error.what());
    std::fflush(stdout);
    return code;
  };
  try {
    return body();
  } catch (const PeerFailureError& e) {
    return report("peer_failure", 3, e);
  } catch (const TimeoutError& e) {
    return report("timeout", 4, e);
  } catch (const MismatchError& e) {
    return report("mismatch", 5, e);
  } catch (const ConfigurationError& e) {
    return report("configuration", 6, e);
  } catch (const std::exception& e) {
    return report("other", 7, e);
  }
}

}  // namespace strata::testing
