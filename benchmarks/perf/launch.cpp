// benchmarks/perf/launch.cpp — the supervisor of `--transport tcp` and its ranks' side
// (launch.hpp).
#include <perf/launch.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>

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

#include <perf/options.hpp>

#include <strata/core/deadline.hpp>

extern char** environ;  // NOLINT: POSIX

namespace strata::perf {

namespace {

std::optional<std::string_view> variable(std::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

int parse_int(std::string_view name, std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw CommandLineError(fmt::format("{}='{}' is not a non-negative integer", name, text));
  return value;
}

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
std::vector<std::string_view> comma_separated(std::string_view text) {
  std::vector<std::string_view> fields;
  while (!text.empty()) {
    const auto comma = text.find(',');
    fields.push_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return fields;
}

[[noreturn]] void fail_errno(std::string_view what) {
  throw std::system_error(errno, std::generic_category(), std::string(what));
}

// A listening socket on 127.0.0.1 on a port the kernel picks; close-on-exec.
int listen_on_loopback(std::uint16_t& port) {
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

// One listening socket per rank, held by the supervisor until the ranks have their copies.
class Listeners {
 public:
  explicit Listeners(int ranks) : ports_(static_cast<std::size_t>(ranks)) {
    try {
      for (auto& port : ports_)
        fds_.push_back(listen_on_loopback(port));
    } catch (...) {
      close();  // a constructor that throws runs no destructor
      throw;
    }
  }
  Listeners(const Listeners&) = delete;
  Listeners& operator=(const Listeners&) = delete;
  ~Listeners() { close(); }

  int fd(int rank) const { return fds_[static_cast<std::size_t>(rank)]; }
  /// "127.0.0.1:P0,127.0.0.1:P1,...": every rank's address, in rank order.
  std::string addresses() const {
    std::string text;
    for (const auto port : ports_)
      text += fmt::format("{}127.0.0.1:{}", text.empty() ? "" : ",", port);
    return text;
  }
  void close() noexcept {
    for (const int fd : fds_)
      ::close(fd);
    fds_.clear();
  }

 private:
  std::vector<std::uint16_t> ports_;
  std::vector<int> fds_;
};

// Each rank's environment, built before fork: ours minus stale worker variables, plus its own.
std::vector<std::vector<std::string>> rank_environments(const Listeners& listeners, int ranks,
                                                        const std::vector<int>& cpus) {
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("STRATA_PERF_WORKER_")) inherited.emplace_back(entry);
  }
  const std::string addresses = listeners.addresses();
  std::vector<std::vector<std::string>> environments;
  for (int r = 0; r < ranks; ++r) {
    auto env = inherited;
    env.push_back(fmt::format("{}={}", kWorkerRankVariable, r));
    env.push_back(fmt::format("{}={}", kWorkerListenFdVariable, listeners.fd(r)));
    env.push_back(fmt::format("{}={}", kWorkerAddressesVariable, addresses));
    env.push_back(fmt::format("{}={}", kWorkerCpusVariable, fmt::join(cpus, ",")));
    environments.push_back(std::move(env));
  }
  return environments;
}

void write_stderr(const char* message, std::size_t length) noexcept {
  [[maybe_unused]] const auto written = ::write(2, message, length);
}

// The child of rank `rank`, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_rank(pid_t parent, int listen_fd, std::optional<int> cpu, char** argv,
                            char** envp) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
  if (::fcntl(listen_fd, F_SETFD, 0) != 0) ::_exit(127);
  if (cpu && !bind_calling_thread(*cpu)) {
    constexpr char kMessage[] = "strata-perf: cannot bind a rank to its CPU (--bind none)\n";
    write_stderr(kMessage, sizeof kMessage - 1);
    ::_exit(127);
  }
  ::execve("/proc/self/exe", argv, envp);
  constexpr char kMessage[] = "strata-perf: cannot re-execute /proc/self/exe\n";
  write_stderr(kMessage, sizeof kMessage - 1);
  ::_exit(127);
}

void kill_and_reap(const std::vector<pid_t>& children) {
  for (const pid_t child : children)
    ::kill(child, SIGKILL);
  for (const pid_t child : children)
    ::waitpid(child, nullptr, 0);
}

// Forks one child per rank; when a fork fails, the started ones are killed before the throw.
std::vector<pid_t> start_ranks(const Listeners& listeners, int ranks, char** argv, Binding binding,
                               const std::vector<int>& cpus) {
  auto environments = rank_environments(listeners, ranks, cpus);
  const pid_t parent = ::getpid();
  std::vector<pid_t> children;
  std::fflush(nullptr);  // what the parent buffered must not be written twice
  for (int r = 0; r < ranks; ++r) {
    std::vector<char*> envp;
    for (auto& entry : environments[static_cast<std::size_t>(r)])
      envp.push_back(entry.data());
    envp.push_back(nullptr);
    const std::optional<int> cpu = cpu_of_rank(binding, r, ranks, cpus);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int error = errno;
      kill_and_reap(children);
      errno = error;
      fail_errno("fork");
    }
    if (pid == 0) exec_rank(parent, listeners.fd(r), cpu, argv, envp.data());
    children.push_back(pid);
  }
  return children;
}

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string describe_status(int wait_status) {
  if (WIFSIGNALED(wait_status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(wait_status),
                       strsignal(WTERMSIG(wait_status)));
  return fmt::format("exited with status {}", exit_status_of(wait_status));
}

// Waits for every rank; after the first failure, the others get `grace` before SIGKILL.
int wait_for_ranks(std::vector<pid_t> children, std::chrono::nanoseconds grace) {
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
      if (exit_status_of(wait_status) != 0 && status == 0) {
        status = exit_status_of(wait_status);
        fmt::print(stderr, "strata-perf: rank {} {}\n", rank, describe_status(wait_status));
        kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
  }
  return status;
}

}  // namespace

std::optional<WorkerEnvironment> worker_environment() {
  const auto rank = variable(kWorkerRankVariable);
  if (!rank) return std::nullopt;
  const auto fd = variable(kWorkerListenFdVariable);
  const auto addresses = variable(kWorkerAddressesVariable);
  if (!fd || !addresses)
    throw CommandLineError(fmt::format("{} is set but {} or {} is not", kWorkerRankVariable,
                                       kWorkerListenFdVariable, kWorkerAddressesVariable));
  WorkerEnvironment worker;
  worker.rank = parse_int(kWorkerRankVariable, *rank);
  worker.listen_fd = parse_int(kWorkerListenFdVariable, *fd);
  for (const auto address : comma_separated(*addresses))
    worker.addresses.push_back(cluster::parse_address(address, kWorkerAddressesVariable));
  if (const auto cpus = variable(kWorkerCpusVariable))
    for (const auto cpu : comma_separated(*cpus))
      worker.group_cpus.push_back(parse_int(kWorkerCpusVariable, cpu));
  if (worker.rank >= static_cast<int>(worker.addresses.size()))
    throw CommandLineError(fmt::format("{}={} is not a rank of the {} addresses in {}",
                                       kWorkerRankVariable, worker.rank, worker.addresses.size(),
                                       kWorkerAddressesVariable));
  return worker;
}

int supervise_local_group(int ranks, char** argv, Binding binding) {
  // Read before anything starts: a malformed STRATA_TIMEOUT fails here, not in every rank.
  const auto grace = default_timeout() + std::chrono::seconds(5);
  Listeners listeners(ranks);
  auto children = start_ranks(listeners, ranks, argv, binding, allowed_cpus());
  listeners.close();
  return wait_for_ranks(std::move(children), grace);
}

}  // namespace strata::perf
