// benchmarks/perf/launch.cpp — the supervisor of `--transport tcp` and its ranks' side
// (launch.hpp).
#include <perf/launch.hpp>

#include <algorithm>
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
#include <utility>

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

// Our environment minus stale worker and server variables.
std::vector<std::string> inherited_environment() {
  std::vector<std::string> inherited;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("STRATA_PERF_WORKER_") && !entry.starts_with("STRATA_PERF_PS_"))
      inherited.emplace_back(entry);
  }
  return inherited;
}

// Each rank's environment, built before fork: ours minus stale variables, plus its own and
// `extra` (what a worker learns about the parameter servers).
std::vector<std::vector<std::string>> rank_environments(const Listeners& listeners, int ranks,
                                                        const std::vector<int>& cpus,
                                                        const std::vector<std::string>& extra) {
  const std::vector<std::string> inherited = inherited_environment();
  const std::string addresses = listeners.addresses();
  std::vector<std::vector<std::string>> environments;
  for (int r = 0; r < ranks; ++r) {
    auto env = inherited;
    env.push_back(fmt::format("{}={}", kWorkerRankVariable, r));
    env.push_back(fmt::format("{}={}", kWorkerListenFdVariable, listeners.fd(r)));
    env.push_back(fmt::format("{}={}", kWorkerAddressesVariable, addresses));
    env.push_back(fmt::format("{}={}", kWorkerCpusVariable, fmt::join(cpus, ",")));
    env.insert(env.end(), extra.begin(), extra.end());
    environments.push_back(std::move(env));
  }
  return environments;
}

// Free ports on 127.0.0.1 for the parameter servers, which bind them themselves: each found by
// binding port 0, all held until every one is found (so that they differ), then released.
std::vector<std::uint16_t> free_loopback_ports(int count) {
  std::vector<std::uint16_t> ports(static_cast<std::size_t>(count));
  std::vector<int> fds;
  try {
    for (auto& port : ports)
      fds.push_back(listen_on_loopback(port));
  } catch (...) {
    for (const int fd : fds)
      ::close(fd);
    throw;
  }
  for (const int fd : fds)
    ::close(fd);
  return ports;
}

// "127.0.0.1:P0,127.0.0.1:P1,...".
std::string loopback_addresses(const std::vector<std::uint16_t>& ports) {
  std::string text;
  for (const auto port : ports)
    text += fmt::format("{}127.0.0.1:{}", text.empty() ? "" : ",", port);
  return text;
}

void write_stderr(const char* message, std::size_t length) noexcept {
  [[maybe_unused]] const auto written = ::write(2, message, length);
}

// The child of a rank (or of a server, which has no `listen_fd`: -1), between fork and exec:
// only async-signal-safe calls.
[[noreturn]] void exec_rank(pid_t parent, int listen_fd, std::optional<int> cpu, char** argv,
                            char** envp) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
  if (listen_fd >= 0 && ::fcntl(listen_fd, F_SETFD, 0) != 0) ::_exit(127);
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

// A process the supervisor started: a rank (a worker) or a parameter server.
struct Child {
  pid_t pid = -1;  ///< -1 once it has been reaped
  bool server = false;
  int index = 0;  ///< its rank, or its server index
};

std::string name_of(const Child& child) {
  return fmt::format("{} {}", child.server ? "ps task" : "rank", child.index);
}

void kill_and_reap(const std::vector<Child>& children) {
  for (const Child& child : children)
    ::kill(child.pid, SIGKILL);
  for (const Child& child : children)
    ::waitpid(child.pid, nullptr, 0);
}

// Forks one child running this program with `environment` on `cpu`; when the fork fails, the
// `started` ones are killed before the throw.
pid_t start_child(std::vector<std::string>& environment, int listen_fd, std::optional<int> cpu,
                  char** argv, const std::vector<Child>& started) {
  std::vector<char*> envp;
  for (auto& entry : environment)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  std::fflush(nullptr);  // what the parent buffered must not be written twice
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    kill_and_reap(started);
    errno = error;
    fail_errno("fork");
  }
  if (pid == 0) exec_rank(parent, listen_fd, cpu, argv, envp.data());
  return pid;
}

// Where the parameter servers and the workers run (--bind core): the servers on the last of
// `cpus`, the workers on the others, so that a worker and a server never share a CPU when there
// are two or more; the servers get a share of the CPUs as they are of the processes (at least
// one, and at least one left for the workers). Without servers, the workers get every CPU.
std::pair<std::vector<int>, std::vector<int>> split_cpus(const std::vector<int>& cpus, int ranks,
                                                         int servers) {
  if (servers == 0 || cpus.size() < 2) return {cpus, cpus};
  const std::size_t n = cpus.size();
  const auto share = static_cast<std::size_t>(
      (n * static_cast<std::size_t>(servers) + static_cast<std::size_t>(ranks + servers) / 2) /
      static_cast<std::size_t>(ranks + servers));
  const std::size_t for_servers = std::clamp<std::size_t>(share, 1, n - 1);
  const auto middle = cpus.begin() + static_cast<std::ptrdiff_t>(n - for_servers);
  return {std::vector<int>(cpus.begin(), middle), std::vector<int>(middle, cpus.end())};
}

// Starts the parameter servers, then the ranks, which learn the servers' addresses and process
// ids; each group placed on its CPUs (split_cpus).
std::vector<Child> start_processes(const Listeners& listeners, int ranks, int servers, char** argv,
                                   Binding binding, const std::vector<int>& cpus) {
  const auto [worker_cpus, server_cpus] = split_cpus(cpus, ranks, servers);
  std::vector<Child> children;
  std::vector<std::string> worker_extra;
  if (servers > 0) {
    const std::string server_addresses = loopback_addresses(free_loopback_ports(servers));
    std::vector<std::string> pids;
    for (int s = 0; s < servers; ++s) {
      auto env = inherited_environment();
      env.push_back(fmt::format("{}={}", kPsIndexVariable, s));
      env.push_back(fmt::format("{}={}", kPsAddressesVariable, server_addresses));
      env.push_back(fmt::format("{}={}", kWorkerAddressesVariable, listeners.addresses()));
      const auto cpu = cpu_of_rank(binding, s, servers, server_cpus);
      const pid_t pid = start_child(env, -1, cpu, argv, children);
      children.push_back({pid, true, s});
      pids.push_back(fmt::format("{}", static_cast<long>(pid)));
    }
    worker_extra.push_back(fmt::format("{}={}", kPsAddressesVariable, server_addresses));
    worker_extra.push_back(fmt::format("{}={}", kPsPidsVariable, fmt::join(pids, ",")));
  }
  auto environments = rank_environments(listeners, ranks, cpus, worker_extra);
  for (int r = 0; r < ranks; ++r) {
    const auto cpu = cpu_of_rank(binding, r, ranks, worker_cpus);
    const pid_t pid = start_child(environments[static_cast<std::size_t>(r)], listeners.fd(r), cpu,
                                  argv, children);
    children.push_back({pid, false, r});
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

// How long the parameter servers may take to exit once every worker has.
constexpr std::chrono::seconds kServerExitGrace{5};

// Waits for every child. After the first failure of a rank, the others get `grace` before
// SIGKILL; after a server's, the rest are killed at once (the workers cannot go on without it);
// once every rank has exited, the servers get kServerExitGrace.
int wait_for_children(std::vector<Child> children, std::chrono::nanoseconds grace) {
  using Clock = std::chrono::steady_clock;
  int status = 0;
  std::size_t running = children.size();
  auto ranks_running = static_cast<std::size_t>(
      std::count_if(children.begin(), children.end(), [](const Child& c) { return !c.server; }));
  std::optional<Clock::time_point> kill_at;
  const auto kill_by = [&](Clock::time_point when) {
    kill_at = kill_at ? std::min(*kill_at, when) : when;
  };
  while (running > 0) {
    int wait_status = 0;
    const pid_t done = ::waitpid(-1, &wait_status, kill_at ? WNOHANG : 0);
    if (done < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (done == 0) {
      if (Clock::now() >= *kill_at) {
        for (const Child& child : children)
          if (child.pid > 0) ::kill(child.pid, SIGKILL);
        kill_at = Clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    for (auto& child : children) {
      if (child.pid != done) continue;
      child.pid = -1;
      --running;
      if (!child.server && --ranks_running == 0 && running > 0)
        kill_by(Clock::now() + kServerExitGrace);
      if (exit_status_of(wait_status) != 0 && status == 0) {
        status = exit_status_of(wait_status);
        fmt::print(stderr, "strata-perf: {} {}\n", name_of(child), describe_status(wait_status));
        kill_by(child.server ? Clock::now() : Clock::now() + grace);
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

std::optional<PsEnvironment> ps_environment() {
  const auto servers = variable(kPsAddressesVariable);
  if (!servers) return std::nullopt;
  PsEnvironment ps;
  for (const auto address : comma_separated(*servers))
    ps.servers.push_back(cluster::parse_address(address, kPsAddressesVariable));
  if (const auto index = variable(kPsIndexVariable)) {
    ps.index = parse_int(kPsIndexVariable, *index);
    if (*ps.index >= static_cast<int>(ps.servers.size()))
      throw CommandLineError(fmt::format("{}={} is not a server of the {} addresses in {}",
                                         kPsIndexVariable, *ps.index, ps.servers.size(),
                                         kPsAddressesVariable));
    const auto workers = variable(kWorkerAddressesVariable);
    if (!workers)
      throw CommandLineError(
          fmt::format("{} is set but {} is not", kPsIndexVariable, kWorkerAddressesVariable));
    for (const auto address : comma_separated(*workers))
      ps.workers.push_back(cluster::parse_address(address, kWorkerAddressesVariable));
  }
  if (const auto pids = variable(kPsPidsVariable))
    for (const auto pid : comma_separated(*pids))
      ps.pids.push_back(parse_int(kPsPidsVariable, pid));
  return ps;
}

int supervise_local_group(int ranks, char** argv, Binding binding, int servers) {
  // Read before anything starts: a malformed STRATA_TIMEOUT fails here, not in every rank.
  const auto grace = default_timeout() + std::chrono::seconds(5);
  Listeners listeners(ranks);
  auto children = start_processes(listeners, ranks, servers, argv, binding, allowed_cpus());
  listeners.close();
  return wait_for_children(std::move(children), grace);
}

}  // namespace strata::perf
