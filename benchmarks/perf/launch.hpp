// benchmarks/perf/launch.hpp — starting the ranks of `--transport tcp` as processes on
// 127.0.0.1, and finding out, in a rank, which one it is.
//
// The parent (the process the user started) is a supervisor, not a rank:
//   1. it binds and listens on one socket per rank on 127.0.0.1, port 0 (the kernel picks free
//      ports, and holding the sockets means no other program can take them before the ranks
//      start); every socket is close-on-exec;
//   2. it forks one child per rank; child r clears close-on-exec on socket r only, binds itself
//      to its CPU (--bind, bind.hpp) and re-executes /proc/self/exe with the same arguments and
//      four variables: its rank, the descriptor of its socket, every rank's address, and the
//      CPUs the supervisor may use (where rank 0 measures --ceiling's two processes). The
//      TcpCommunicator adopts the socket (TcpMembership::listen_fd). Children die with the
//      parent (PR_SET_PDEATHSIG);
//   3. it closes its copies of the sockets and waits. Exit status: 0 when every rank exits 0,
//      else the first failure's (a rank killed by signal S counts as 128+S). After a first
//      failure the others get the communicators' deadline plus 5 s to fail too (they usually
//      do within milliseconds: a dead peer is a PeerFailureError), then SIGKILL.
// POSIX (Linux) only: fork, execve, waitpid, prctl.
#pragma once

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bind.hpp"
#include "options.hpp"

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/deadline.hpp>

extern char** environ;  // NOLINT: POSIX

namespace strata::perf {

/// The variables a supervisor gives each rank it starts.
inline constexpr std::string_view kWorkerRankVariable = "STRATA_PERF_WORKER_RANK";
inline constexpr std::string_view kWorkerListenFdVariable = "STRATA_PERF_WORKER_LISTEN_FD";
inline constexpr std::string_view kWorkerAddressesVariable = "STRATA_PERF_WORKER_ADDRESSES";
inline constexpr std::string_view kWorkerCpusVariable = "STRATA_PERF_WORKER_CPUS";

/// What a rank started by the supervisor learns from its environment.
struct WorkerEnvironment {
  int rank = 0;
  int listen_fd = -1;
  std::vector<cluster::Address> addresses;
  std::vector<int> group_cpus;  ///< the supervisor's CPUs: the group's, before any --bind
};

namespace detail::launch {

inline std::optional<std::string_view> variable(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

inline int parse_int(std::string_view name, std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw CommandLineError(fmt::format("{}='{}' is not a non-negative integer", name, text));
  return value;
}

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
inline std::vector<std::string_view> comma_separated(std::string_view text) {
  std::vector<std::string_view> fields;
  while (!text.empty()) {
    const auto comma = text.find(',');
    fields.push_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return fields;
}

[[noreturn]] inline void fail_errno(std::string_view what) {
  throw std::system_error(errno, std::generic_category(), std::string(what));
}

// A listening socket on 127.0.0.1 on a port the kernel picks; close-on-exec.
inline int listen_on_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    fail_errno("listening on 127.0.0.1");
  }
  port = ntohs(address.sin_port);
  return fd;
}

inline int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

inline std::string describe_status(int wait_status) {
  if (WIFSIGNALED(wait_status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(wait_status),
                       strsignal(WTERMSIG(wait_status)));
  return fmt::format("exited with status {}", exit_status_of(wait_status));
}

}  // namespace detail::launch

/// The rank this process was started as by a supervisor, or nothing when it was not.
/// @throws CommandLineError when the variables are present but malformed.
inline std::optional<WorkerEnvironment> worker_environment() {
  namespace d = detail::launch;
  const auto rank = d::variable(kWorkerRankVariable);
  if (!rank) return std::nullopt;
  const auto fd = d::variable(kWorkerListenFdVariable);
  const auto addresses = d::variable(kWorkerAddressesVariable);
  if (!fd || !addresses)
    throw CommandLineError(fmt::format("{} is set but {} or {} is not", kWorkerRankVariable,
                                       kWorkerListenFdVariable, kWorkerAddressesVariable));
  WorkerEnvironment worker;
  worker.rank = d::parse_int(kWorkerRankVariable, *rank);
  worker.listen_fd = d::parse_int(kWorkerListenFdVariable, *fd);
  for (const auto address : d::comma_separated(*addresses))
    worker.addresses.push_back(cluster::parse_address(address, kWorkerAddressesVariable));
  if (const auto cpus = d::variable(kWorkerCpusVariable))
    for (const auto cpu : d::comma_separated(*cpus))
      worker.group_cpus.push_back(d::parse_int(kWorkerCpusVariable, cpu));
  if (worker.rank >= static_cast<int>(worker.addresses.size()))
    throw CommandLineError(fmt::format("{}={} is not a rank of the {} addresses in {}",
                                       kWorkerRankVariable, worker.rank, worker.addresses.size(),
                                       kWorkerAddressesVariable));
  return worker;
}

/// Starts `ranks` copies of this program (`argv` as given to main) as the ranks of a TCP group
/// on 127.0.0.1, placed as `binding` says, waits for them, and returns the exit status (see the
/// file comment).
/// @throws std::system_error when the sockets or processes cannot be created (nothing is left
/// running).
inline int supervise_local_group(int ranks, char** argv, Binding binding) {
  namespace d = detail::launch;
  // Read before anything starts: a malformed STRATA_TIMEOUT fails here, not in every rank.
  const auto grace = default_timeout() + std::chrono::seconds(5);
  std::vector<int> fds;
  std::vector<std::uint16_t> ports(static_cast<std::size_t>(ranks));
  auto close_all = [&] {
    for (const int fd : fds)
      ::close(fd);
    fds.clear();
  };
  try {
    for (int r = 0; r < ranks; ++r)
      fds.push_back(d::listen_on_loopback(ports[static_cast<std::size_t>(r)]));
  } catch (...) {
    close_all();
    throw;
  }
  std::string addresses;
  for (const auto port : ports)
    addresses += fmt::format("{}127.0.0.1:{}", addresses.empty() ? "" : ",", port);

  const std::vector<int> cpus = allowed_cpus();
  // Each child's environment, built before fork: ours minus stale worker variables, plus its own.
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("STRATA_PERF_WORKER_")) inherited.emplace_back(entry);
  }
  std::vector<std::vector<std::string>> environments;
  for (int r = 0; r < ranks; ++r) {
    auto env = inherited;
    env.push_back(fmt::format("{}={}", kWorkerRankVariable, r));
    env.push_back(fmt::format("{}={}", kWorkerListenFdVariable, fds[static_cast<std::size_t>(r)]));
    env.push_back(fmt::format("{}={}", kWorkerAddressesVariable, addresses));
    env.push_back(fmt::format("{}={}", kWorkerCpusVariable, fmt::join(cpus, ",")));
    environments.push_back(std::move(env));
  }

  const pid_t parent = ::getpid();
  std::vector<pid_t> children;
  auto kill_children = [&] {
    for (const pid_t child : children)
      ::kill(child, SIGKILL);
    for (const pid_t child : children)
      ::waitpid(child, nullptr, 0);
  };
  std::fflush(nullptr);  // what the parent buffered must not be written twice
  for (int r = 0; r < ranks; ++r) {
    std::vector<char*> envp;
    for (auto& entry : environments[static_cast<std::size_t>(r)])
      envp.push_back(entry.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int error = errno;
      kill_children();
      close_all();
      errno = error;
      d::fail_errno("fork");
    }
    if (pid == 0) {
      // Only async-signal-safe calls until exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
      if (::fcntl(fds[static_cast<std::size_t>(r)], F_SETFD, 0) != 0) ::_exit(127);
      if (const auto cpu = cpu_of_rank(binding, r, ranks, cpus);
          cpu && !bind_calling_thread(*cpu)) {
        constexpr char kMessage[] = "strata-perf: cannot bind a rank to its CPU (--bind none)\n";
        [[maybe_unused]] const auto written = ::write(2, kMessage, sizeof kMessage - 1);
        ::_exit(127);
      }
      ::execve("/proc/self/exe", argv, envp.data());
      constexpr char kMessage[] = "strata-perf: cannot re-execute /proc/self/exe\n";
      [[maybe_unused]] const auto written = ::write(2, kMessage, sizeof kMessage - 1);
      ::_exit(127);
    }
    children.push_back(pid);
  }
  close_all();

  // Wait for every rank; after the first failure, give the others a deadline.
  int status = 0;
  std::size_t running = children.size();
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  while (running > 0) {
    int wait_status = 0;
    const pid_t done = ::waitpid(-1, &wait_status, kill_at ? WNOHANG : 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (done == 0) {
      if (std::chrono::steady_clock::now() >= *kill_at) {
        for (const pid_t child : children)
          if (child > 0) ::kill(child, SIGKILL);
        kill_at = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (auto& child : children) {
      if (child != done) continue;
      const int rank = static_cast<int>(&child - children.data());
      child = -1;
      --running;
      if (d::exit_status_of(wait_status) != 0 && status == 0) {
        status = d::exit_status_of(wait_status);
        fmt::print(stderr, "strata-perf: rank {} {}\n", rank, d::describe_status(wait_status));
        kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
  }
  return status;
}

}  // namespace strata::perf
