// tests/support/exceptions.hpp — what a test learns from an exception caught on another thread.
#pragma once

#include <exception>
#include <string>

namespace strata::testing {

/// The exception's message, for test output: "(no exception)" when there is none.
inline std::string message_of(const std::exception_ptr& error) {
  if (!error) return "(no exception)";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "(not a std::exception)";
  }
}

/// Whether `error` holds an exception of type E (or derived from it).
template <class E>
bool holds(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace strata::testing
