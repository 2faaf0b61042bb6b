// strata/detail/spin_wait.hpp — waiting briefly for another thread before blocking.
#pragma once

#include <thread>

#include <strata/detail/usable_cpus.hpp>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// How long a waiter polls before it blocks. Waking a thread blocked on a futex costs tens of
/// microseconds (more on a VM), far more than a small collective, so waiters poll first.
struct SpinPolicy {
  int spins = 2000;  // pause-and-poll rounds: only when every waiter has a core of its own
  int yields = 200;  // give-the-core-away rounds
  // Even with a core per thread, two threads often share one: a woken thread is commonly
  // placed on its waker's core (most condition-variable wake-ups on KVM guests), and the
  // scheduler takes tens of milliseconds to spread them again. A waiter that spun without a
  // break would hold the core its partner needs for all its spins at every wait;
  // yielding after each short burst bounds that to one burst, and costs a waiter alone on
  // its core one system call per burst.
  static constexpr int kSpinsPerYield = 64;

  /// The policy for `threads` threads that wait for each other: spinning only pays when each
  /// has a core; oversubscribed, it steals the core the awaited thread needs, so only yield.
  static SpinPolicy for_threads(int threads) noexcept {
    SpinPolicy policy;
    if (threads > usable_cpus()) policy.spins = 0;
    return policy;
  }

  /// Polls `ready` as the policy says; true as soon as it holds, false when the caller
  /// should block.
  template <class Ready>
  bool poll(Ready&& ready) const {
    for (int i = 1; i <= spins; ++i) {
      if (ready()) return true;
      if (i % kSpinsPerYield == 0)
        std::this_thread::yield();
      else
        cpu_relax();
    }
    for (int i = 0; i < yields; ++i) {
      if (ready()) return true;
      std::this_thread::yield();
    }
    return ready();
  }
};

}  // namespace strata::detail
