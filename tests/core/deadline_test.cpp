// Tests for strata/core/deadline.hpp: parse_timeout, default_timeout (STRATA_TIMEOUT) and
// Deadline.
#include <strata/core/deadline.hpp>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include <doctest/doctest.h>

namespace {

using namespace std::chrono_literals;
using strata::parse_timeout;

// Checks that parsing `text` throws ConfigurationError naming `setting` and quoting `text`.
void check_rejected(std::string_view text, std::string_view setting = "STRATA_TIMEOUT") {
  CAPTURE(std::string(text));
  bool thrown = false;
  try {
    if (setting == "STRATA_TIMEOUT") {
      parse_timeout(text);  // the default argument
    } else {
      parse_timeout(text, setting);
    }
  } catch (const strata::ConfigurationError& e) {
    thrown = true;
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.rank() == -1);
    CHECK(e.operation() == setting);
    CHECK(message.starts_with("strata: " + std::string(setting) + ": "));
    CHECK(message.find("'" + std::string(text) + "'") != std::string::npos);
    CHECK(message.find("; give a positive duration") != std::string::npos);
  }
  CHECK(thrown);
}

// Sets or clears STRATA_TIMEOUT for one scope and restores what was there before.
class ScopedTimeoutEnv {
 public:
  explicit ScopedTimeoutEnv(const char* value) {
    if (const char* old = std::getenv("STRATA_TIMEOUT")) saved_ = old;
    if (value != nullptr) {
      ::setenv("STRATA_TIMEOUT", value, 1);
    } else {
      ::unsetenv("STRATA_TIMEOUT");
    }
  }
  ~ScopedTimeoutEnv() {
    if (saved_) {
      ::setenv("STRATA_TIMEOUT", saved_->c_str(), 1);
    } else {
      ::unsetenv("STRATA_TIMEOUT");
    }
  }
  ScopedTimeoutEnv(const ScopedTimeoutEnv&) = delete;
  ScopedTimeoutEnv& operator=(const ScopedTimeoutEnv&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST_CASE("parse_timeout accepts seconds, milliseconds and minutes") {
  CHECK(parse_timeout("30") == 30s);  // a bare number means seconds
  CHECK(parse_timeout("30s") == 30s);
  CHECK(parse_timeout("1500ms") == 1500ms);
  CHECK(parse_timeout("2m") == 2min);
  CHECK(parse_timeout("2min") == 2min);
  CHECK(parse_timeout("1ms") == 1ms);
  // Up to a week exactly.
  CHECK(parse_timeout("10080m") == std::chrono::hours(24 * 7));
  CHECK(parse_timeout("604800s") == std::chrono::hours(24 * 7));
  CHECK(parse_timeout("604800000ms") == std::chrono::hours(24 * 7));
}

TEST_CASE("parse_timeout rejects anything else with a ConfigurationError naming the setting") {
  for (const char* text : {"", "0", "-5", "abc", "5h", "99999999999999999999", "10000000m", "0ms",
                           "30 s", "1.5s", "s", " 30", "30sec", "+5", "10081m", "604800001ms"}) {
    check_rejected(text);
  }
  check_rejected("soon", "CommunicatorOptions::timeout");  // the caller names the setting
}

TEST_CASE("default_timeout honours STRATA_TIMEOUT") {
  {
    const ScopedTimeoutEnv env(nullptr);
    CHECK(strata::default_timeout() == strata::kDefaultTimeout);
    CHECK(strata::kDefaultTimeout == 60s);
  }
  {
    const ScopedTimeoutEnv env("");
    CHECK(strata::default_timeout() == strata::kDefaultTimeout);
  }
  {
    const ScopedTimeoutEnv env("5s");
    CHECK(strata::default_timeout() == 5s);
  }
  {
    const ScopedTimeoutEnv env("250ms");
    CHECK(strata::default_timeout() == 250ms);
  }
  {
    const ScopedTimeoutEnv env("forever");
    bool thrown = false;
    try {
      strata::default_timeout();
    } catch (const strata::ConfigurationError& e) {
      thrown = true;
      const std::string message = e.what();
      CHECK(message.find("STRATA_TIMEOUT") != std::string::npos);
      CHECK(message.find("'forever'") != std::string::npos);
    }
    CHECK(thrown);
  }
  {
    // Read on every call: changing the environment takes effect.
    const ScopedTimeoutEnv env("7s");
    CHECK(strata::default_timeout() == 7s);
    ::setenv("STRATA_TIMEOUT", "8s", 1);
    CHECK(strata::default_timeout() == 8s);
  }
}

TEST_CASE("Deadline expires after its budget") {
  const auto before = strata::Clock::now();
  const strata::Deadline long_one = strata::Deadline::after(1h);
  const auto after = strata::Clock::now();
  CHECK_FALSE(long_one.expired());
  CHECK(long_one.budget() == 1h);
  CHECK(long_one.time_point() >= before + 1h);
  CHECK(long_one.time_point() <= after + 1h);

  CHECK(strata::Deadline::after(0ns).expired());
  CHECK(strata::Deadline::after(-1s).expired());

  const strata::Deadline short_one = strata::Deadline::after(20ms);
  CHECK(short_one.budget() == 20ms);
  std::this_thread::sleep_until(short_one.time_point() + 1ms);
  CHECK(short_one.expired());

  // budget() reports whole milliseconds, for messages.
  CHECK(strata::Deadline::after(1500us).budget() == 1ms);
}

}  // namespace
