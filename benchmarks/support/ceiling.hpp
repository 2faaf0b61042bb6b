// benchmarks/support/ceiling.hpp — what this machine allows, measured in the same run as the
// collectives, so that every table can say how close it comes:
//   tcp_duplex       two processes on loopback sending to each other at once (bytes each way
//                    per second), with a given socket buffer size (0: the kernel's autotuning)
//                    and congestion control (empty: the kernel's default);
//   tcp_round_trip   a 1-byte ping-pong between two processes, the receiver either sleeping in
//                    recv(2) or polling with MSG_DONTWAIT (median of the round trips);
//                    tcp_ping_pong: the same with messages of any size;
//   tcp_stream       one direction: one process sends a message of a given size, the other
//                    receives it whole and answers with one byte, both polling (median time
//                    of a message);
//   memcpy / add     single-core bandwidth of copying and of out = a + b over float arrays
//                    (bytes read + written per second).
// Rates are in bytes per second (decimal units are the caller's business). POSIX only.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace strata::bench {

namespace detail::ceiling {

using Clock = std::chrono::steady_clock;

[[noreturn]] inline void fail(const std::string& what) {
  throw std::runtime_error("ceiling: " + what + ": " + std::strerror(errno));
}

// A connected TCP pair over 127.0.0.1: {listener side, connector side}.
inline std::pair<int, int> loopback_pair(int buffer_bytes, const std::string& congestion) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) fail("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail("listen on 127.0.0.1");
  const int connector = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connector < 0) fail("socket");
  auto tune = [&](int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!congestion.empty() && ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                                            static_cast<socklen_t>(congestion.size())) != 0)
      fail("TCP congestion control " + congestion);
    if (buffer_bytes > 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
    }
  };
  tune(connector);
  if (::connect(connector, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    fail("connect to 127.0.0.1");
  const int accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (accepted < 0) fail("accept");
  tune(accepted);
  ::close(listener);
  return {accepted, connector};
}

// Runs `child(fd)` in a forked process on one end and `parent(fd)` here on the other; returns
// what the parent returns once the child has exited successfully.
template <class Parent, class Child>
double in_two_processes(int buffer_bytes, const std::string& congestion, Parent parent,
                        Child child) {
  const auto [mine, theirs] = loopback_pair(buffer_bytes, congestion);
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    ::close(mine);
    int code = 0;
    try {
      child(theirs);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  ::close(theirs);
  double result = 0;
  try {
    result = parent(mine);
  } catch (...) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    ::close(mine);
    throw;
  }
  ::close(mine);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("ceiling: the peer process failed");
  return result;
}

// Sends and receives `bytes` at once on `fd` (non-blocking, poll-driven).
inline void exchange(int fd, std::size_t bytes, std::vector<char>& out, std::vector<char>& in) {
  std::size_t sent = 0;
  std::size_t received = 0;
  while (sent < bytes || received < bytes) {
    bool moved = false;
    if (sent < bytes) {
      const auto n = ::send(fd, out.data() + sent % out.size(),
                            std::min(out.size() - sent % out.size(), bytes - sent),
                            MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        moved = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail("send");
      }
    }
    if (received < bytes) {
      const auto n =
          ::recv(fd, in.data() + received % in.size(),
                 std::min(in.size() - received % in.size(), bytes - received), MSG_DONTWAIT);
      if (n > 0) {
        received += static_cast<std::size_t>(n);
        moved = true;
      } else if (n == 0) {
        throw std::runtime_error("ceiling: the peer closed the connection");
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail("recv");
      }
    }
    if (!moved) {
      // Poll without sleeping, as a fast transport does: a sleeping process invites the
      // scheduler to wake it on its peer's core, and the two then share one.
      pollfd p{fd,
               static_cast<short>((sent < bytes ? POLLOUT : 0) | (received < bytes ? POLLIN : 0)),
               0};
      const auto give_up = Clock::now() + std::chrono::seconds(10);
      while (::poll(&p, 1, 0) == 0)
        if (Clock::now() > give_up) throw std::runtime_error("ceiling: the peer stalled");
    }
  }
}

inline void send_all(int fd, const char* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("send");
    data += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

inline void receive_one(int fd, char& byte, bool busy_poll) {
  for (;;) {
    const auto n = ::recv(fd, &byte, 1, busy_poll ? MSG_DONTWAIT : 0);
    if (n == 1) return;
    if (n == 0) throw std::runtime_error("ceiling: the peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail("recv");
  }
}

// Receives exactly `bytes` into `data`, sleeping in recv(2) or polling with MSG_DONTWAIT.
inline void receive_all(int fd, char* data, std::size_t bytes, bool busy_poll) {
  while (bytes > 0) {
    const auto n = ::recv(fd, data, bytes, busy_poll ? MSG_DONTWAIT : 0);
    if (n > 0) {
      data += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw std::runtime_error("ceiling: the peer closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) fail("recv");
  }
}

// Waits for `events` on `fd` by polling without sleeping (as a fast transport does).
inline void spin_until_ready(int fd, short events) {
  pollfd p{fd, events, 0};
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (::poll(&p, 1, 0) == 0)
    if (Clock::now() > give_up) throw std::runtime_error("ceiling: the peer stalled");
}

// Sends `bytes` of `data` without blocking, polling while the socket buffer is full.
inline void send_polling(int fd, const char* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::send(fd, data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      bytes -= static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      fail("send");
    } else {
      spin_until_ready(fd, POLLOUT);
    }
  }
}

// Receives `bytes` into `data` without blocking, polling while nothing has arrived.
inline void receive_polling(int fd, char* data, std::size_t bytes) {
  while (bytes > 0) {
    const auto n = ::recv(fd, data, bytes, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      bytes -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw std::runtime_error("ceiling: the peer closed the connection");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      fail("recv");
    } else {
      spin_until_ready(fd, POLLIN);
    }
  }
}

// Confines the calling process to `cpu` (a negative one: leaves it where it is).
inline void bind_to_cpu(int cpu) {
  if (cpu < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (::sched_setaffinity(0, sizeof one, &one) != 0) fail("binding to a CPU");
}

inline double median_of(std::vector<double>& values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

}  // namespace detail::ceiling

/// Bytes per second each way when two processes send `total_bytes` to each other at once over
/// loopback TCP (both directions together move twice that), streaming out of and into arrays
/// of `array_bytes` (1 MiB stays in cache; 64 MiB comes from memory, as a large collective's
/// data does); `congestion` names the TCP congestion control (empty: the kernel's default).
inline double tcp_duplex_bytes_per_second(std::size_t total_bytes, int socket_buffer_bytes = 0,
                                          const std::string& congestion = {},
                                          std::size_t array_bytes = std::size_t{1} << 20) {
  using namespace detail::ceiling;
  auto run = [total_bytes, array_bytes](int fd) {
    std::vector<char> out(array_bytes, 'x');
    std::vector<char> in(array_bytes);
    exchange(fd, total_bytes / 8, out, in);  // warm-up: slow start, buffer autotuning
    const auto start = Clock::now();
    exchange(fd, total_bytes, out, in);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  const double seconds =
      in_two_processes(socket_buffer_bytes, congestion, run, [&](int fd) { run(fd); });
  return static_cast<double>(total_bytes) / seconds;
}

/// Median round-trip time of a 1-byte ping-pong between two processes on loopback TCP, the
/// waiting side sleeping in recv(2) (`busy_poll` false) or polling without blocking.
inline std::chrono::nanoseconds tcp_round_trip(bool busy_poll, int round_trips = 2000) {
  using namespace detail::ceiling;
  const double median_ns = in_two_processes(
      0, {},
      [&](int fd) {
        std::vector<double> times;
        times.reserve(static_cast<std::size_t>(round_trips));
        char byte = 1;
        for (int i = 0; i < round_trips + 100; ++i) {
          const auto start = Clock::now();
          send_all(fd, &byte, 1);
          receive_one(fd, byte, busy_poll);
          if (i >= 100)  // the first ones warm caches and the scheduler up
            times.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
        }
        return median_of(times);
      },
      [&](int fd) {
        char byte = 0;
        for (int i = 0; i < round_trips + 100; ++i) {
          receive_one(fd, byte, busy_poll);
          send_all(fd, &byte, 1);
        }
      });
  return std::chrono::nanoseconds(static_cast<std::int64_t>(median_ns));
}

/// Median round-trip time of a ping-pong of `bytes`-byte messages (each way) between this
/// process and a child on loopback TCP, the waiting side sleeping in recv(2) (`busy_poll`
/// false) or polling without blocking; the child runs on `peer_cpu` (negative: where this
/// process may run).
inline std::chrono::nanoseconds tcp_ping_pong(std::size_t bytes, bool busy_poll,
                                              int round_trips = 2000, int peer_cpu = -1) {
  using namespace detail::ceiling;
  const std::size_t size = std::max<std::size_t>(bytes, 1);
  const double median_ns = in_two_processes(
      0, {},
      [&](int fd) {
        std::vector<char> message(size, 1);
        std::vector<double> times;
        times.reserve(static_cast<std::size_t>(round_trips));
        for (int i = 0; i < round_trips + 100; ++i) {
          const auto start = Clock::now();
          send_all(fd, message.data(), size);
          receive_all(fd, message.data(), size, busy_poll);
          if (i >= 100)  // the first ones warm caches and the scheduler up
            times.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
        }
        return median_of(times);
      },
      [&](int fd) {
        bind_to_cpu(peer_cpu);
        std::vector<char> message(size);
        for (int i = 0; i < round_trips + 100; ++i) {
          receive_all(fd, message.data(), size, busy_poll);
          send_all(fd, message.data(), size);
        }
      });
  return std::chrono::nanoseconds(static_cast<std::int64_t>(median_ns));
}

/// Median time of one message of `bytes` from this process to a child over loopback TCP: sent
/// from an array of that size, received whole into another, answered with one byte, both ends
/// polling without sleeping, the kernel's socket buffers and congestion control `congestion`
/// (empty: the kernel's default). After `warmup` untimed messages (slow start, buffer
/// autotuning), the median of `iters`. The child runs on `peer_cpu` (negative: where this
/// process may run).
inline std::chrono::nanoseconds tcp_stream(std::size_t bytes, int warmup, int iters,
                                           int peer_cpu = -1, const std::string& congestion = {}) {
  using namespace detail::ceiling;
  const std::size_t size = std::max<std::size_t>(bytes, 1);
  const int total = warmup + std::max(iters, 1);
  const double median_ns = in_two_processes(
      0, congestion,
      [&](int fd) {
        std::vector<char> message(size, 'x');
        std::vector<double> times;
        char ack = 0;
        for (int i = 0; i < total; ++i) {
          const auto start = Clock::now();
          send_polling(fd, message.data(), size);
          receive_polling(fd, &ack, 1);
          if (i >= warmup)
            times.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
        }
        return median_of(times);
      },
      [&](int fd) {
        bind_to_cpu(peer_cpu);
        std::vector<char> message(size);
        const char ack = 1;
        for (int i = 0; i < total; ++i) {
          receive_polling(fd, message.data(), size);
          send_polling(fd, &ack, 1);
        }
      });
  return std::chrono::nanoseconds(static_cast<std::int64_t>(median_ns));
}

/// Single-core memcpy bandwidth over `bytes`-sized buffers: bytes read + written per second,
/// best of `repeats`.
inline double memcpy_bytes_per_second(std::size_t bytes, int repeats = 10) {
  std::vector<char> from(bytes, 'a');
  std::vector<char> to(bytes, 'b');
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = detail::ceiling::Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    const double seconds =
        std::chrono::duration<double>(detail::ceiling::Clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
    from[static_cast<std::size_t>(i) % bytes] = to[bytes - 1];  // keep the copy observable
  }
  return best;
}

/// Single-core bandwidth of out = a + b over float arrays of `bytes` each: bytes read +
/// written per second, best of `repeats`.
inline double add_bytes_per_second(std::size_t bytes, int repeats = 10) {
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  std::vector<float> a(count, 1.0F);
  std::vector<float> b(count, 2.0F);
  std::vector<float> out(count);
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    const auto start = detail::ceiling::Clock::now();
    for (std::size_t j = 0; j < count; ++j)
      out[j] = a[j] + b[j];
    const double seconds =
        std::chrono::duration<double>(detail::ceiling::Clock::now() - start).count();
    best = std::max(best, 3.0 * static_cast<double>(count * sizeof(float)) / seconds);
    a[static_cast<std::size_t>(i) % count] = out[count - 1];  // keep the sums observable
  }
  return best;
}

}  // namespace strata::bench
