// strata/core/environment.hpp — the one place strata reads environment variables.
//
// Nothing else in strata calls getenv: resolvers take an `Environment`, so that tests (and
// programs that receive their configuration some other way) can hand them a map instead of
// mutating the process environment, which is not thread-safe; the few process-wide defaults
// (STRATA_TIMEOUT, STRATA_CLUSTER_TOKEN, TF_CONFIG) are read through `process_environment()`.
#pragma once

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace strata {

/// A read-only view of environment variables: returns the value of `name`, or `std::nullopt`
/// when it is not set. A variable set to the empty string is returned as "" (resolvers treat
/// it as unset, like `STRATA_TIMEOUT`).
using Environment = std::function<std::optional<std::string>(std::string_view name)>;

/// The environment of this process, read with `std::getenv` on every lookup (so changes made
/// before a resolver runs are seen). Reading is safe as long as no thread calls `setenv`
/// concurrently.
///
/// Example: `auto env = strata::cluster::torchrun_environment(strata::process_environment());`
inline Environment process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const std::string key(name);
    // NOLINTNEXTLINE(concurrency-mt-unsafe): read-only, see above.
    const char* value = std::getenv(key.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

/// An environment holding exactly `variables` (nothing from the process), for tests and for
/// programs that take their settings from a file or command line.
///
/// Example: `environment_from({{"RANK", "1"}, {"WORLD_SIZE", "4"}})`
inline Environment environment_from(std::map<std::string, std::string> variables) {
  return [variables = std::move(variables)](std::string_view name) -> std::optional<std::string> {
    const auto it = variables.find(std::string(name));
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
}

/// The value of `name` in the process environment, unset and empty alike as nullopt.
inline std::optional<std::string> environment_variable(std::string_view name) {
  auto value = process_environment()(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

}  // namespace strata
