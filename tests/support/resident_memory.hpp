// tests/support/resident_memory.hpp — the test process's resident memory, for tests that check
// that a peer's claim of a huge payload costs nothing until its bytes come.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <thread>

#include <unistd.h>

namespace strata::testing {

/// This process's resident bytes, from /proc/self/statm.
inline std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0;
  std::size_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

/// How much the resident memory grew above `before` while watched for up to 2 s (less once it
/// reached `limit`): a buffer being zero-filled grows it steadily, slowly under TSan.
inline std::size_t resident_growth(std::size_t before, std::size_t limit) {
  std::size_t grown = 0;
  for (int i = 0; i < 80 && grown < limit; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    const std::size_t now = resident_bytes();
    grown = std::max(grown, now - std::min(before, now));
  }
  return grown;
}

}  // namespace strata::testing
