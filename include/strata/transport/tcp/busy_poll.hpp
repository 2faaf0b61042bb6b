// strata/transport/tcp/busy_poll.hpp — waiting for sockets: poll without sleeping first, then
// sleep in poll(2) until a deadline.
//
// A peer's answer usually comes within microseconds, and waking from a sleeping poll(2) costs
// far more (docs/performance.md), so every wait of the TCP layer asks first without sleeping.
#pragma once

#include <algorithm>
#include <chrono>
#include <span>

#include <poll.h>
#include <sched.h>

#include <strata/core/deadline.hpp>

namespace strata::transport::tcp {

/// How long a rank polls its sockets without blocking once nothing moves, before it sleeps in
/// poll(2): longer than a loopback round trip and than one step of a ring whose ranks share
/// cores, short next to a scheduler tick. Waking from a sleeping poll(2) costs more than most
/// such waits last (benchmarks/RESULTS.md).
inline constexpr std::chrono::microseconds kBusyPoll{1000};

/// poll(2) on `fds`: without sleeping until `busy_until`, yielding in between so that processes
/// sharing a core run, then sleeping until `until`. Returns poll's result: 0 once `until` has
/// passed, -1 with errno set (EINTR included). Asking poll(2), not retrying recv(2), matters:
/// recv takes the socket lock that the sender's softirq needs to deliver the data.
inline int poll_busy_then_sleep(std::span<pollfd> fds, Clock::time_point busy_until,
                                Clock::time_point until) {
  busy_until = std::min(busy_until, until);
  while (Clock::now() < busy_until) {
    const int ready = ::poll(fds.data(), fds.size(), 0);
    if (ready != 0) return ready;
    ::sched_yield();
  }
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
  if (left.count() <= 0) return ::poll(fds.data(), fds.size(), 0);
  return ::poll(fds.data(), fds.size(),
                static_cast<int>(std::min<long long>(left.count(), 1'000'000)));
}

}  // namespace strata::transport::tcp
