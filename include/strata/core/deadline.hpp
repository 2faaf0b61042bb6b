// strata/core/deadline.hpp — deadlines for every blocking call, and the STRATA_TIMEOUT default.
#pragma once

#include <charconv>
#include <chrono>
#include <string_view>

#include <fmt/format.h>

#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>

namespace strata {

/// The clock every strata deadline is measured on (monotonic: wall-clock jumps change nothing).
using Clock = std::chrono::steady_clock;

/// A point in time after which a blocking call gives up with `TimeoutError`.
///
/// Collectives take their deadline from `CommunicatorOptions::timeout` unless the call passes
/// its own `CallOptions::timeout`; `Deadline` turns that duration into a point in time once,
/// at the start of the call, so that every wait inside the call shares one budget.
class Deadline {
 public:
  /// Expires `timeout` from now.
  static Deadline after(std::chrono::nanoseconds timeout) noexcept {
    return Deadline(Clock::now() + timeout, timeout);
  }

  Clock::time_point time_point() const noexcept { return at_; }
  /// The duration this deadline was created with, for messages ("timed out after 2000 ms").
  std::chrono::milliseconds budget() const noexcept {
    return std::chrono::duration_cast<std::chrono::milliseconds>(budget_);
  }
  bool expired() const noexcept { return Clock::now() >= at_; }

 private:
  Deadline(Clock::time_point at, std::chrono::nanoseconds budget) noexcept
      : at_(at), budget_(budget) {}

  Clock::time_point at_;
  std::chrono::nanoseconds budget_;
};

/// The default deadline when no option sets one.
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(60)};

/// Parses a timeout such as "30", "30s", "1500ms", "2m" (a bare number means seconds).
/// @throws ConfigurationError for anything else: negative, zero, empty, unknown unit, overflow.
inline std::chrono::milliseconds parse_timeout(std::string_view text,
                                               std::string_view setting = "STRATA_TIMEOUT") {
  auto fail = [&](std::string_view why) -> std::chrono::milliseconds {
    throw ConfigurationError(-1, setting,
                             fmt::format("cannot use '{}' as a timeout: {}", text, why),
                             "give a positive duration such as 30, 30s, 1500ms or 2m");
  };
  long long value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec == std::errc::result_out_of_range) return fail("the number is too large");
  if (ec != std::errc() || end == first) return fail("it does not start with a number");
  if (value <= 0) return fail("it must be positive");
  const std::string_view unit(end, static_cast<std::size_t>(last - end));
  long long scale_ms = 0;
  if (unit.empty() || unit == "s")
    scale_ms = 1000;
  else if (unit == "ms")
    scale_ms = 1;
  else if (unit == "m" || unit == "min")
    scale_ms = 60'000;
  else
    return fail("unknown unit (use ms, s or m)");
  // A week is far beyond any sane collective; the bound also keeps time_point arithmetic safe.
  constexpr long long kMaxMs = 7LL * 24 * 3600 * 1000;
  if (value > kMaxMs / scale_ms) return fail("it is longer than a week");
  return std::chrono::milliseconds(value * scale_ms);
}

/// `STRATA_TIMEOUT` if set (see `parse_timeout`), else `kDefaultTimeout`. Read on every call so
/// that tests and launchers may change the environment between groups.
/// @throws ConfigurationError when STRATA_TIMEOUT is set but malformed.
inline std::chrono::milliseconds default_timeout() {
  const auto text = environment_variable("STRATA_TIMEOUT");
  return text ? parse_timeout(*text) : kDefaultTimeout;
}

}  // namespace strata
