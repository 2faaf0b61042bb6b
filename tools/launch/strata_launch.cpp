// strata-launch — runs N workers of a program on this machine as one tf.distribute cluster,
// optionally with a chief and parameter-server (ps) tasks.
//
//   strata-launch -n N [--chief] [--ps M] [--local-replicas K] [--host HOST] [--grace SECONDS]
//                 [--ps-grace SECONDS] -- PROGRAM ARGS...
//
// -n N counts the tasks of the collective group: the N processes that run the training loop.
// Without --chief they are worker 0..N-1; with --chief the first is the chief and the others are
// worker 0..N-2 (TensorFlow counts the chief apart from the workers; -n does not). Task r of the
// group (r = 0..N-1: the chief, then the workers by index, which is strata's collective rank)
// runs PROGRAM ARGS... with
//   TF_CONFIG={"cluster": {"worker": ["HOST:p0", ..., "HOST:pN-1"]},
//              "task": {"type": "worker", "index": r}}
// where p0..pN-1 are distinct free TCP ports of HOST (default 127.0.0.1); worker 0 acts as
// chief, as TensorFlow documents for clusters without a chief job. With --chief the cluster is
// {"chief": ["HOST:p0"], "worker": ["HOST:p1", ...]} (no "worker" job when N is 1) and task r is
// {"type": "chief", "index": 0} for r = 0, {"type": "worker", "index": r-1} otherwise. With
// --ps M, M more tasks run the same PROGRAM ARGS... as "ps" 0..M-1, on M more ports reserved
// with the others, and every task's cluster also has "ps": ["HOST:q0", ..., "HOST:qM-1"]. Every
// task of the group also gets STRATA_LAUNCH_RANK=r; every task, ps included,
// STRATA_LAUNCH_WORLD_SIZE=N (the size of the group) and, with --local-replicas,
// STRATA_LOCAL_REPLICAS=K; ps tasks get no STRATA_LAUNCH_RANK (they are not in the group).
// Unless OMP_NUM_THREADS is set, every task gets OMP_NUM_THREADS = max(1, usable CPUs / (N × K))
// (K = 1 without --local-replicas), as torchrun sets it for processes that share a host: each
// process's OpenMP pool (libtorch's intra-op threads) would otherwise take every CPU, and N of
// them oversubscribe the machine.
// Rank variables of other launchers (torchrun, OpenMPI, SLURM, PMI) are removed so that they
// cannot override TF_CONFIG; the rest of the environment is inherited. Stdin is /dev/null.
//
// Every line a task writes is printed as "[r] line" ("[ps i] line" for ps task i) on the
// launcher's stdout (task stdout) or stderr (task stderr); a last line without newline is printed
// when the task exits, and lines longer than 64 KiB are printed in 64 KiB pieces. Messages name
// tasks the same way: "rank r", "ps i".
//
// Each task that exits non-zero or by a signal is reported on stderr as it is seen
// ("strata-launch: rank 2 exited with status 76 (MismatchError)", "... killed by signal 9
// (SIGKILL)", "strata-launch: ps 0 exited with status 1"). After the first failure the others
// get a short window (min(--grace, 2 s)) to report their own errors and exit by themselves: in a
// strata group they are already failing. Then every task still running gets SIGTERM to its
// process group, and SIGKILL if it is still running --grace seconds later (default 5). SIGINT or
// SIGTERM to the launcher is forwarded once to every task's process group at once, with the same
// escalation; a second one sends SIGKILL at once. (A SIGINT that is ignored when the launcher
// starts stays ignored, as shells expect of background commands.) On Linux a task also gets
// SIGTERM if the launcher itself is killed.
//
// A ps task is expected to return once every task of the group has finished (strata's
// ps::serve_if_ps() does). When every task of the group has exited 0 and a ps task is still
// running --ps-grace seconds later (default 30), the launcher says so, naming it, and stops it
// with the same SIGTERM -> SIGKILL escalation; the run then fails with status 124.
//
// After a failure a summary names the root cause first, one line per task. A task killed by
// a signal the launcher did not send, or that exited non-zero with a status other than
// strata's timeout and peer-failure statuses (strata::ExitStatus), is a root cause; tasks
// that exited with those two failed because of a peer; a task that was still running and
// stopped (SIGSTOP) when its peers timed out is named as the stalled one; a ps task that
// outlived the group by --ps-grace is named as such. Among root causes the earliest seen comes
// first; two tasks killed at once are both named.
//
// Exit status: 0 when every task exited 0; else the first root cause's status (128+S for
// signal S); 124 when a ps task had to be stopped after the group finished; 130/143 after
// SIGINT/SIGTERM to the launcher; 2 for usage errors; 1 when the launcher itself fails (no free
// ports, fork failure). A PROGRAM that cannot be executed makes its task print
// "strata-launch: cannot run PROGRAM: <reason>" and exit 127.
//
// POSIX only: fork/execvp, pipes, poll, waitpid, kill; one thread.
#include <strata/config.hpp>
#include <strata/core/error.hpp>
#include <strata/detail/usable_cpus.hpp>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxLineBytes = 64 * 1024;  // longer lines are printed in pieces
constexpr int kLauncherError = 1;
constexpr int kUsageError = 2;
constexpr int kCannotExecute = 127;  // what shells use for "command not found"
// How long the other workers get to report and exit by themselves after a failure, at most.
constexpr std::chrono::milliseconds kReportWindow{2000};

// A ps task still running --ps-grace after the group finished: what timeout(1) uses.
constexpr int kPsOutlived = 124;

constexpr std::string_view kUsage =
    R"(usage: strata-launch -n N [--chief] [--ps M] [--local-replicas K] [--host HOST]
                     [--grace SECONDS] [--ps-grace SECONDS] -- PROGRAM [ARGS...]

Runs N workers of PROGRAM on this machine, each with a TF_CONFIG describing an N-worker cluster
on free ports of HOST (worker 0 acts as chief), and prints their output prefixed with "[rank] ".
With --chief the first of them is a chief task instead; with --ps M, M parameter-server tasks
join the cluster. When a task fails, the others get a short window to report and exit, are then
stopped, and the launcher prints a summary naming the root cause and exits with its status.

options:
  -n N                  number of workers (N >= 1): the processes of the collective group,
                        the chief included with --chief
  --chief               the first of the N is the chief (TF_CONFIG task "chief" 0) and the
                        others are workers 0..N-2, so "-n 4 --chief" is chief + 3 workers
  --ps M                also run M parameter-server tasks (TF_CONFIG task "ps" 0..M-1) of the
                        same PROGRAM and ARGS (M >= 0, default 0); their output is prefixed
                        with "[ps i] "
  --local-replicas K    set STRATA_LOCAL_REPLICAS=K in every task (K >= 1)
  --host HOST           address the tasks listen on (default 127.0.0.1)
  --grace SECONDS       time between SIGTERM and SIGKILL when stopping tasks (default 5);
                        after a failure the others first get min(SECONDS, 2) to exit
  --ps-grace SECONDS    how long ps tasks may run on after the chief and every worker exited
                        0 (default 30); one still running is then stopped, and the launcher
                        exits 124 naming it
  -h, --help            print this help and exit
  --version             print the version and exit

Every task's TF_CONFIG lists the whole cluster (chief, worker and ps jobs). Every task of the
collective group gets STRATA_LAUNCH_RANK (the chief 0, then the workers) and every task
STRATA_LAUNCH_WORLD_SIZE (N); ps tasks get no STRATA_LAUNCH_RANK. Rank variables of torchrun,
OpenMPI, SLURM and PMI are removed from every task's environment. Unless OMP_NUM_THREADS is set,
every task gets OMP_NUM_THREADS = max(1, usable CPUs / (N x K)), K the local replicas (1 without
--local-replicas), so that the tasks' OpenMP pools do not oversubscribe the machine.
)";

struct Options {
  int workers = 0;  // -n: the collective group, the chief included
  bool chief = false;
  int ps = 0;
  std::optional<int> local_replicas;
  std::string host = "127.0.0.1";
  std::chrono::milliseconds grace{5000};
  std::chrono::milliseconds ps_grace{30000};
  std::vector<std::string> command;
};

struct ParseResult {
  enum class Action { run, help, version, usage_error } action = Action::run;
  Options options;
  std::string error;
};

// ---- output ------------------------------------------------------------------------------------

// Writes everything, retrying on EINTR and waiting out a non-blocking descriptor; a closed
// reader (EPIPE: SIGPIPE is ignored) drops the output rather than stopping the workers.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n > 0) {
      text.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return;
    }
  }
}

void message(std::string_view text) {
  write_all(STDERR_FILENO, fmt::format("strata-launch: {}\n", text));
}

// pipe() with close-on-exec (and optionally non-blocking) ends; pipe2() is not on every POSIX
// system, and with one thread nothing can fork between the two calls.
bool make_pipe(int (&fds)[2], bool nonblocking) {
  if (::pipe(fds) != 0) return false;
  for (const int fd : fds) {
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (nonblocking) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return true;
}

// ---- command line ------------------------------------------------------------------------------

std::optional<int> parse_int_at_least(std::string_view text, int minimum) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || value < minimum) return std::nullopt;
  return value;
}

std::optional<int> parse_positive_int(std::string_view text) {
  return parse_int_at_least(text, 1);
}

std::optional<std::chrono::milliseconds> parse_seconds(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  // A year is far beyond any useful grace period and keeps the conversion in range.
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value) || value < 0 ||
      value > 365.0 * 24 * 3600) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(std::llround(value * 1000));
}

ParseResult parse_command_line(int argc, char** argv) {
  ParseResult result;
  auto fail = [&](std::string error) {
    result.action = ParseResult::Action::usage_error;
    result.error = std::move(error);
    return result;
  };
  bool have_workers = false;
  bool have_separator = false;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      have_separator = true;
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      result.action = ParseResult::Action::help;
      return result;
    }
    if (arg == "--version") {
      result.action = ParseResult::Action::version;
      return result;
    }
    if (arg == "--chief") {
      result.options.chief = true;
      continue;
    }
    // "-n N", "-nN", "--opt VALUE" and "--opt=VALUE".
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
      }
    } else if (arg.starts_with("-n") && arg.size() > 2) {
      name = "-n";
      value = arg.substr(2);
    }
    if (name == "--chief") return fail("option '--chief' takes no value");
    if (name != "-n" && name != "--ps" && name != "--local-replicas" && name != "--host" &&
        name != "--grace" && name != "--ps-grace") {
      return fail(fmt::format("unknown option '{}'", arg));
    }
    if (!value) {
      if (i + 1 >= argc) return fail(fmt::format("option '{}' needs a value", name));
      value = argv[++i];
    }
    if (name == "-n") {
      const auto n = parse_positive_int(*value);
      if (!n) return fail(fmt::format("-n needs a positive number of workers, not '{}'", *value));
      result.options.workers = *n;
      have_workers = true;
    } else if (name == "--ps") {
      const auto m = parse_int_at_least(*value, 0);
      if (!m) return fail(fmt::format("--ps needs a number of ps tasks >= 0, not '{}'", *value));
      result.options.ps = *m;
    } else if (name == "--local-replicas") {
      const auto k = parse_positive_int(*value);
      if (!k)
        return fail(fmt::format("--local-replicas needs a positive number, not '{}'", *value));
      result.options.local_replicas = *k;
    } else if (name == "--host") {
      if (value->empty()) return fail("--host needs a host name or address");
      result.options.host = std::string(*value);
    } else {
      const auto grace = parse_seconds(*value);
      if (!grace) return fail(fmt::format("{} needs seconds >= 0, not '{}'", name, *value));
      (name == "--grace" ? result.options.grace : result.options.ps_grace) = *grace;
    }
  }
  if (!have_workers) return fail("missing -n N (the number of workers)");
  if (result.options.ps > INT_MAX - result.options.workers)
    return fail(fmt::format("-n {} and --ps {} are too many tasks", result.options.workers,
                            result.options.ps));
  if (!have_separator) return fail("missing '--' before the program to run");
  if (i >= argc) return fail("missing the program to run after '--'");
  result.options.command.assign(argv + i, argv + argc);
  return result;
}

// ---- cluster description -----------------------------------------------------------------------

struct PortReservation {
  std::vector<int> ports;
  std::vector<int> sockets;  // held open so that the N ports stay distinct, closed before fork
  std::string error;
};

// Binds N sockets to HOST:0 at once and reads the ports the kernel chose. The ports are free
// again once the sockets are closed, just before the workers start; another process may take
// one in that gap, which the workers survive because their rendezvous retries.
PortReservation reserve_ports(const std::string& host, int count) {
  PortReservation result;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    result.error = fmt::format("cannot resolve host '{}': {}", host, ::gai_strerror(rc));
    return result;
  }
  // The first address of HOST that all N sockets bind to.
  std::string last_error = "no address";
  for (addrinfo* address = found; address != nullptr; address = address->ai_next) {
    for (int k = 0; k < count; ++k) {
      const int fd = ::socket(address->ai_family, address->ai_socktype, address->ai_protocol);
      if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      sockaddr_storage bound{};
      socklen_t length = sizeof bound;
      if (fd < 0 || ::bind(fd, address->ai_addr, address->ai_addrlen) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
        last_error = std::strerror(errno);
        if (fd >= 0) ::close(fd);
        break;
      }
      result.sockets.push_back(fd);
      const auto port = bound.ss_family == AF_INET6
                            ? reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port
                            : reinterpret_cast<const sockaddr_in*>(&bound)->sin_port;
      result.ports.push_back(ntohs(port));
    }
    if (static_cast<int>(result.ports.size()) == count) break;
    for (const int fd : result.sockets)
      ::close(fd);
    result.sockets.clear();
    result.ports.clear();
  }
  ::freeaddrinfo(found);
  if (static_cast<int>(result.ports.size()) != count) {
    result.error = fmt::format("cannot reserve {} free ports on '{}': {}", count, host, last_error);
  }
  return result;
}

// One task of the cluster: its TF_CONFIG job and index, and how the launcher names it.
struct TaskId {
  std::string type;  // "chief", "worker" or "ps"
  int index = 0;
  int rank = -1;  // in the collective group (the chief, then the workers); -1 for ps tasks

  bool is_ps() const { return rank < 0; }
  // "2" or "ps 0": the output prefix is "[label] ", messages say "rank 2" or "ps 0".
  std::string label() const { return is_ps() ? fmt::format("ps {}", index) : fmt::to_string(rank); }
  std::string name() const { return is_ps() ? label() : fmt::format("rank {}", rank); }
};

// The tasks in launch order: the collective group by rank, then the ps tasks by index. Task i
// listens on addresses[i].
std::vector<TaskId> cluster_tasks(const Options& options) {
  std::vector<TaskId> tasks;
  for (int rank = 0; rank < options.workers; ++rank) {
    if (options.chief && rank == 0) {
      tasks.push_back({"chief", 0, 0});
    } else {
      tasks.push_back({"worker", options.chief ? rank - 1 : rank, rank});
    }
  }
  for (int index = 0; index < options.ps; ++index)
    tasks.push_back({"ps", index, -1});
  return tasks;
}

// The "cluster" of TF_CONFIG: every job that has tasks, each a list in index order.
nlohmann::json cluster_json(const std::vector<TaskId>& tasks,
                            const std::vector<std::string>& addresses) {
  nlohmann::json cluster = nlohmann::json::object();
  for (std::size_t i = 0; i < tasks.size(); ++i)
    cluster[tasks[i].type].push_back(addresses[i]);
  return cluster;
}

std::string tf_config(const nlohmann::json& cluster, const TaskId& task) {
  const nlohmann::json config = {
      {"cluster", cluster},
      {"task", {{"type", task.type}, {"index", task.index}}},
  };
  return config.dump();
}

// Rank variables of other launchers; a worker that saw them might believe them over TF_CONFIG.
bool is_foreign_rank_variable(std::string_view name) {
  static constexpr auto kNames = std::to_array<std::string_view>(
      {// torchrun / torch.distributed.elastic
       "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
       "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
       // SLURM
       "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
       "SLURM_STEP_NUM_TASKS",
       // PMI / PMIx (MPICH, Intel MPI, OpenMPI)
       "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "PMI_LOCAL_RANK"});
  static constexpr auto kPrefixes =
      std::to_array<std::string_view>({"OMPI_COMM_WORLD_", "TORCHELASTIC_"});
  return std::find(kNames.begin(), kNames.end(), name) != kNames.end() ||
         std::any_of(kPrefixes.begin(), kPrefixes.end(),
                     [&](std::string_view prefix) { return name.starts_with(prefix); });
}

// The inherited environment minus other launchers' rank variables and the ones we set.
std::vector<std::string> base_environment(bool set_local_replicas) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const std::string_view name = text.substr(0, text.find('='));
    if (is_foreign_rank_variable(name) || name == "TF_CONFIG" || name == "STRATA_LAUNCH_RANK" ||
        name == "STRATA_LAUNCH_WORLD_SIZE" ||
        (set_local_replicas && name == "STRATA_LOCAL_REPLICAS")) {
      continue;
    }
    env.emplace_back(text);
  }
  return env;
}

std::string signal_name(int signal) {
  static constexpr std::array<std::pair<int, std::string_view>, 16> kNames = {{
      {SIGHUP, "SIGHUP"},
      {SIGINT, "SIGINT"},
      {SIGQUIT, "SIGQUIT"},
      {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},
      {SIGABRT, "SIGABRT"},
      {SIGBUS, "SIGBUS"},
      {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},
      {SIGUSR1, "SIGUSR1"},
      {SIGSEGV, "SIGSEGV"},
      {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},
      {SIGALRM, "SIGALRM"},
      {SIGTERM, "SIGTERM"},
      {SIGXCPU, "SIGXCPU"},
  }};
  for (const auto& [number, name] : kNames) {
    if (number == signal) return fmt::format("signal {} ({})", signal, name);
  }
  return fmt::format("signal {}", signal);
}

// ---- signals -----------------------------------------------------------------------------------

// The handler only counts and wakes poll() through the self-pipe: async-signal-safe. The main
// loop compares the counts with the ones it has handled, so no signal is lost or seen twice.
volatile std::sig_atomic_t g_sigint_count = 0;
volatile std::sig_atomic_t g_sigterm_count = 0;
int g_wake_write_fd = -1;

extern "C" void on_signal(int signal) {
  const int saved_errno = errno;
  if (signal == SIGINT) g_sigint_count = g_sigint_count + 1;
  if (signal == SIGTERM) g_sigterm_count = g_sigterm_count + 1;
  const char byte = 0;
  [[maybe_unused]] const ssize_t ignored = ::write(g_wake_write_fd, &byte, 1);
  errno = saved_errno;
}

constexpr std::array<int, 3> kHandledSignals = {SIGINT, SIGTERM, SIGCHLD};

// ---- workers -----------------------------------------------------------------------------------

struct Stream {
  int fd = -1;   // read end of the worker's pipe, non-blocking; -1 once closed
  int out = -1;  // where its lines go: our stdout or stderr
  std::string pending;
};

// One task the launcher started: a chief, worker or ps task.
struct Worker {
  TaskId id;
  int position = 0;  // in launch order: the group by rank, then the ps tasks
  pid_t pid = -1;
  bool running = false;
  Stream out, err;
  std::vector<std::string> env;  // "NAME=value", prepared before fork
  // How it ended, once reaped.
  int code = 0;                       // exit status, or 128+S for signal S
  int signal = 0;                     // the signal that killed it, 0 when it exited
  long order = -1;                    // the reap pass that saw it end: smaller is earlier
  bool signaled_by_launcher = false;  // it was still running when the launcher signaled it
  bool stalled = false;               // stopped (SIGSTOP) when the launcher had to stop it
  bool outlived = false;              // a ps task still running --ps-grace after the group finished
};

// What a worker's end says about the failure.
enum class Role { fine, root_cause, stalled, outlived, after_peer, stopped_by_launcher };

Role role_of(const Worker& worker) {
  if (worker.stalled) return Role::stalled;
  if (worker.outlived) return Role::outlived;
  if (worker.code == 0) return Role::fine;
  // Any signal after the launcher's (its SIGTERM or SIGKILL, or the user's SIGINT it forwarded).
  if (worker.signaled_by_launcher && worker.signal != 0) return Role::stopped_by_launcher;
  if (worker.signal == 0 && (worker.code == static_cast<int>(strata::ExitStatus::peer_failure) ||
                             worker.code == static_cast<int>(strata::ExitStatus::timeout)))
    return Role::after_peer;
  return Role::root_cause;
}

// "exited with status 69 (PeerFailureError)", "killed by signal 9 (SIGKILL)".
std::string describe_end(const Worker& worker);

// True when the process is stopped (state T in /proc/PID/stat): a SIGSTOPped worker.
bool is_stopped(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'T';
}

// "30 s", "0.5 s".
std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g} s", static_cast<double>(duration.count()) / 1000);
}

// The tasks of the collective group, for messages: "the chief and every worker", "every worker".
std::string group_text(const Options& options) {
  if (!options.chief) return "every worker";
  return options.workers > 1 ? "the chief and every worker" : "the chief";
}

class Launcher {
 public:
  Launcher(Options options, int wake_read_fd)
      : options_(std::move(options)), wake_read_fd_(wake_read_fd) {}

  // Starts the tasks, relays their output until all have exited, returns the exit status.
  int run(const std::vector<TaskId>& tasks, std::vector<std::vector<std::string>> environments,
          PortReservation& reservation);

 private:
  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
  }
  bool group_running() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.running && !w.id.is_ps(); });
  }
  void check_ps_shutdown();
  bool start(Worker& worker, int null_fd);
  [[noreturn]] void exec_worker(Worker& worker, int null_fd, int out_fd, int err_fd, pid_t parent);
  void poll_once();
  void read_stream(Worker& worker, Stream& stream, bool drain);
  void emit(const Worker& worker, const Stream& stream, std::string_view line) const;
  void close_stream(Worker& worker, Stream& stream);
  void reap();
  void handle_signals();
  void stop(int signal, int exit_status);
  void signal_running(int signal);
  void kill_remaining();
  void summarize();

  Options options_;
  int wake_read_fd_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  bool killed_ = false;
  int exit_status_ = 0;
  long reap_passes_ = 0;
  std::optional<Clock::time_point> stop_at_;  // end of the report window after a failure
  std::optional<Clock::time_point> kill_at_;
  // When ps tasks still running after the whole group exited 0 are stopped.
  std::optional<Clock::time_point> ps_deadline_;
  std::sig_atomic_t sigint_seen_ = 0;
  std::sig_atomic_t sigterm_seen_ = 0;
};

int Launcher::run(const std::vector<TaskId>& tasks,
                  std::vector<std::vector<std::string>> environments,
                  PortReservation& reservation) {
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    message(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
    return kLauncherError;
  }
  workers_.resize(environments.size());
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    workers_[i].id = tasks[i];
    workers_[i].position = static_cast<int>(i);
    workers_[i].env = std::move(environments[i]);
    workers_[i].out.out = STDOUT_FILENO;
    workers_[i].err.out = STDERR_FILENO;
  }

  // Signals stay blocked while forking: a child must not run our handler (it would write to
  // our self-pipe) before it has reset the dispositions.
  sigset_t handled, previous;
  sigemptyset(&handled);
  for (const int signal : kHandledSignals)
    sigaddset(&handled, signal);
  ::sigprocmask(SIG_BLOCK, &handled, &previous);
  for (const int fd : reservation.sockets)
    ::close(fd);
  reservation.sockets.clear();
  for (auto& worker : workers_) {
    if (!start(worker, null_fd)) {
      stop(SIGTERM, kLauncherError);
      break;
    }
  }
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  ::close(null_fd);

  while (any_running())
    poll_once();
  summarize();
  return exit_status_;
}

bool Launcher::start(Worker& worker, int null_fd) {
  int out_pipe[2], err_pipe[2];
  if (!make_pipe(out_pipe, false)) {
    message(fmt::format("cannot create a pipe for {}: {}", worker.id.name(), std::strerror(errno)));
    return false;
  }
  if (!make_pipe(err_pipe, false)) {
    message(fmt::format("cannot create a pipe for {}: {}", worker.id.name(), std::strerror(errno)));
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return false;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    message(fmt::format("cannot start {}: {}", worker.id.name(), std::strerror(errno)));
    for (const int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      ::close(fd);
    return false;
  }
  if (pid == 0) exec_worker(worker, null_fd, out_pipe[1], err_pipe[1], parent);

  // Also here, not only in the child: the group must exist before we may signal it.
  ::setpgid(pid, pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  for (const int fd : {out_pipe[0], err_pipe[0]})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  worker.pid = pid;
  worker.running = true;
  worker.out.fd = out_pipe[0];
  worker.err.fd = err_pipe[0];
  return true;
}

void Launcher::exec_worker(Worker& worker, int null_fd, int out_fd, int err_fd, pid_t parent) {
  // Its own process group: the terminal's Ctrl-C reaches only the launcher, which forwards it.
  ::setpgid(0, 0);
#if defined(__linux__)
  // A launcher killed by SIGKILL cannot stop its workers; the kernel does it instead.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(kLauncherError);
#else
  (void)parent;
#endif
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  // Every other descriptor of ours is close-on-exec. Ignored signals would stay ignored across
  // exec (SIGPIPE is ignored in the launcher), and handlers must not run before exec.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (const int signal : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE})
    ::sigaction(signal, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  std::vector<char*> envp;
  for (auto& entry : worker.env)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& arg : options_.command)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  environ = envp.data();  // execvp searches PATH of this environment, then passes it on
  ::execvp(argv[0], argv.data());
  const std::string text =
      fmt::format("strata-launch: cannot run {}: {}\n", options_.command[0], std::strerror(errno));
  write_all(STDERR_FILENO, text);
  ::_exit(kCannotExecute);
}

void Launcher::poll_once() {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, Stream*>> owners;
  fds.push_back({wake_read_fd_, POLLIN, 0});
  owners.emplace_back(nullptr, nullptr);
  for (auto& worker : workers_) {
    for (Stream* stream : {&worker.out, &worker.err}) {
      if (stream->fd < 0) continue;
      fds.push_back({stream->fd, POLLIN, 0});
      owners.emplace_back(&worker, stream);
    }
  }
  // Without a pending stop or SIGKILL the wait is driven by output, signals and SIGCHLD alone.
  int timeout_ms = -1;
  for (const auto& at : {stop_at_, kill_at_, ps_deadline_}) {
    if (!at) continue;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*at - Clock::now());
    const int ms =
        static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(left.count(), 0, INT_MAX));
    timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
  }
  const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready > 0) {
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) read_stream(*owners[i].first, *owners[i].second, false);
    }
    if (fds[0].revents != 0) {
      char buffer[256];
      while (::read(wake_read_fd_, buffer, sizeof buffer) > 0) {
      }
    }
  }
  handle_signals();
  reap();
  check_ps_shutdown();
  if (stop_at_ && Clock::now() >= *stop_at_) {
    stop_at_.reset();
    for (auto& worker : workers_)
      if (worker.running) worker.stalled = is_stopped(worker.pid);
    stop(SIGTERM, exit_status_);
  }
  if (kill_at_ && Clock::now() >= *kill_at_) kill_remaining();
}

void Launcher::check_ps_shutdown() {
  // Only ps tasks are left, and the group ended well: a failure would have set one of the two.
  if (stopping_ || stop_at_ || group_running() || !any_running()) return;
  if (!ps_deadline_) ps_deadline_ = Clock::now() + options_.ps_grace;
  if (Clock::now() < *ps_deadline_) return;
  ps_deadline_.reset();
  std::string names;
  int count = 0;
  for (auto& worker : workers_) {
    if (!worker.running) continue;
    worker.outlived = true;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", worker.id.name());
    ++count;
  }
  message(fmt::format(
      "{} still running {} after {} exited 0, stopping {} (a ps task should "
      "return once the others have finished, as strata::ps::serve_if_ps() does)",
      names, seconds_text(options_.ps_grace), group_text(options_), count == 1 ? "it" : "them"));
  stop(SIGTERM, kPsOutlived);
}

void Launcher::read_stream(Worker& worker, Stream& stream, bool drain) {
  char buffer[kMaxLineBytes];
  // When draining an exited worker, a bounded number of reads: a grandchild that inherited the
  // pipe could otherwise keep us reading forever.
  for (int reads = 0; reads < (drain ? 64 : 1); ++reads) {
    const ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_stream(worker, stream);
      return;
    }
    stream.pending.append(buffer, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t newline; (newline = stream.pending.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      emit(worker, stream, std::string_view(stream.pending).substr(start, newline - start));
    }
    stream.pending.erase(0, start);
    while (stream.pending.size() >= kMaxLineBytes) {
      emit(worker, stream, std::string_view(stream.pending).substr(0, kMaxLineBytes));
      stream.pending.erase(0, kMaxLineBytes);
    }
  }
}

void Launcher::emit(const Worker& worker, const Stream& stream, std::string_view line) const {
  // A line may reach kMaxLineBytes twice over when a read completes it: split it here too.
  do {
    const auto piece = line.substr(0, kMaxLineBytes);
    line.remove_prefix(piece.size());
    std::string text = fmt::format("[{}] ", worker.id.label());
    text.append(piece);
    text.push_back('\n');
    write_all(stream.out, text);
  } while (!line.empty());
}

void Launcher::close_stream(Worker& worker, Stream& stream) {
  if (!stream.pending.empty()) emit(worker, stream, stream.pending);
  stream.pending.clear();
  if (stream.fd >= 0) ::close(stream.fd);
  stream.fd = -1;
}

void Launcher::reap() {
  ++reap_passes_;
  for (auto& worker : workers_) {
    if (!worker.running) continue;
    int status = 0;
    pid_t done;
    do {
      done = ::waitpid(worker.pid, &status, WNOHANG);
    } while (done < 0 && errno == EINTR);
    if (done != worker.pid) continue;
    worker.running = false;
    // What it wrote before exiting is in the pipes; print it before saying how it ended. Output
    // of descendants that outlive it is not waited for.
    for (Stream* stream : {&worker.out, &worker.err}) {
      if (stream->fd >= 0) read_stream(worker, *stream, true);
      close_stream(worker, *stream);
    }
    worker.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    worker.code = WIFSIGNALED(status) ? 128 + worker.signal : WEXITSTATUS(status);
    worker.order = reap_passes_;
    if (worker.code == 0) continue;
    message(fmt::format("{} {}", worker.id.name(), describe_end(worker)));
    if (stopping_ || stop_at_) continue;
    ps_deadline_.reset();
    // The first failure: the others are failing too and get a moment to say why.
    exit_status_ = worker.code;
    stop_at_ = Clock::now() + std::min<std::chrono::milliseconds>(options_.grace, kReportWindow);
  }
}

std::string describe_end(const Worker& worker) {
  if (worker.signal != 0) return fmt::format("killed by {}", signal_name(worker.signal));
  std::string_view meaning;
  switch (static_cast<strata::ExitStatus>(worker.code)) {
    case strata::ExitStatus::timeout:
      meaning = " (TimeoutError)";
      break;
    case strata::ExitStatus::peer_failure:
      meaning = " (PeerFailureError)";
      break;
    case strata::ExitStatus::mismatch:
      meaning = " (MismatchError)";
      break;
    case strata::ExitStatus::configuration:
      meaning = " (ConfigurationError)";
      break;
    case strata::ExitStatus::usage_error:
      meaning = " (UsageError)";
      break;
    case strata::ExitStatus::checkpoint:
      meaning = " (CheckpointError)";
      break;
    default:
      break;
  }
  return fmt::format("exited with status {}{}", worker.code, meaning);
}

void Launcher::summarize() {
  std::vector<const Worker*> order;
  for (const auto& worker : workers_)
    if (role_of(worker) != Role::fine) order.push_back(&worker);
  // Nothing failed by itself (every worker ended well or by the launcher's signals, as after a
  // Ctrl-C): nothing to blame.
  if (std::all_of(order.begin(), order.end(),
                  [](const Worker* w) { return role_of(*w) == Role::stopped_by_launcher; }))
    return;
  // Root causes first, by when they ended (then rank, then ps index); then the stalled; then ps
  // tasks that outlived the group; then the rest.
  std::stable_sort(order.begin(), order.end(), [](const Worker* a, const Worker* b) {
    return std::tuple(role_of(*a), a->order, a->position) <
           std::tuple(role_of(*b), b->order, b->position);
  });
  std::vector<const Worker*> causes;
  for (const Worker* worker : order) {
    const Role role = role_of(*worker);
    if (role == Role::root_cause || role == Role::stalled || role == Role::outlived)
      causes.push_back(worker);
  }
  if (causes.empty()) causes.push_back(order.front());  // only echoes: the earliest
  std::string blamed;
  for (const Worker* cause : causes)
    blamed += fmt::format("{}{}", blamed.empty() ? "" : ", ", cause->id.name());
  // The status is the first root cause's; a stalled worker was ended by the launcher, so the
  // status stays that of the first failure it caused; a ps task that outlived the group leaves
  // kPsOutlived.
  if (!sigint_seen_ && !sigterm_seen_ && role_of(*causes.front()) == Role::root_cause)
    exit_status_ = causes.front()->code;
  std::string text = fmt::format("summary: the failure started at {}\n", blamed);
  for (const Worker* worker : order) {
    std::string line = fmt::format("strata-launch:   {}: ", worker->id.name());
    const bool cause = std::find(causes.begin(), causes.end(), worker) != causes.end();
    const Role role = role_of(*worker);
    switch (cause && role != Role::stalled && role != Role::outlived ? Role::root_cause : role) {
      case Role::root_cause:
        line += fmt::format("{} (root cause)", describe_end(*worker));
        break;
      case Role::stalled:
        line += "stopped (SIGSTOP) while its peers waited for it (root cause); killed";
        break;
      case Role::outlived:
        line += fmt::format("still running {} after {} exited 0 (root cause); then {}",
                            seconds_text(options_.ps_grace), group_text(options_),
                            describe_end(*worker));
        break;
      case Role::after_peer:
        line += fmt::format("{}, after {} failed", describe_end(*worker), blamed);
        break;
      case Role::stopped_by_launcher:
        line += fmt::format("{} by strata-launch", describe_end(*worker));
        break;
      case Role::fine:
        break;
    }
    text += line + "\n";
  }
  text.pop_back();
  message(text);
}

void Launcher::handle_signals() {
  for (const auto& [signal, count, seen] :
       {std::tuple{SIGINT, &g_sigint_count, &sigint_seen_},
        std::tuple{SIGTERM, &g_sigterm_count, &sigterm_seen_}}) {
    if (*count == *seen) continue;
    *seen = *count;
    if (!stopping_) {
      message(fmt::format("received {}, forwarding it to the workers", signal_name(signal)));
      stop(signal, 128 + signal);
    } else if (!killed_) {
      message(fmt::format("received {} again, killing the workers", signal_name(signal)));
      kill_remaining();
    }
  }
}

void Launcher::stop(int signal, int exit_status) {
  stop_at_.reset();
  ps_deadline_.reset();
  stopping_ = true;
  exit_status_ = exit_status;
  signal_running(signal);
  kill_at_ = Clock::now() + options_.grace;
}

void Launcher::signal_running(int signal) {
  for (auto& worker : workers_) {
    if (worker.running) worker.signaled_by_launcher = true;
    // The group reaches the worker's own children too; the pid alone covers a worker that has
    // moved to a group of its own.
    if (worker.running && ::kill(-worker.pid, signal) != 0) ::kill(worker.pid, signal);
  }
}

void Launcher::kill_remaining() {
  kill_at_.reset();
  killed_ = true;
  // "rank 0", "ranks 0, 1", "ranks 0, 1, ps 0", "ps 0, 1".
  std::string ranks, ps;
  for (const auto& worker : workers_) {
    if (!worker.running) continue;
    std::string& list = worker.id.is_ps() ? ps : ranks;
    list += fmt::format("{}{}", list.empty() ? "" : ", ",
                        worker.id.is_ps() ? worker.id.index : worker.id.rank);
  }
  if (ranks.empty() && ps.empty()) return;
  std::string names;
  if (!ranks.empty())
    names = fmt::format("rank{} {}", ranks.find(',') == std::string::npos ? "" : "s", ranks);
  if (!ps.empty()) names += fmt::format("{}ps {}", names.empty() ? "" : ", ", ps);
  message(fmt::format("sending SIGKILL to {}", names));
  signal_running(SIGKILL);
}

// Descriptors 0-2 must be open, or a pipe could land on one of them and a worker's dup2 onto
// it would keep its close-on-exec flag.
void ensure_standard_descriptors() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_descriptors();
  const ParseResult parsed = parse_command_line(argc, argv);
  switch (parsed.action) {
    case ParseResult::Action::help:
      write_all(STDOUT_FILENO, kUsage);
      return 0;
    case ParseResult::Action::version:
      write_all(STDOUT_FILENO, fmt::format("strata-launch {}.{}.{}\n", STRATA_VERSION_MAJOR,
                                           STRATA_VERSION_MINOR, STRATA_VERSION_PATCH));
      return 0;
    case ParseResult::Action::usage_error:
      message(parsed.error);
      write_all(STDERR_FILENO, kUsage);
      return kUsageError;
    case ParseResult::Action::run:
      break;
  }
  const Options& options = parsed.options;

  const std::vector<TaskId> tasks = cluster_tasks(options);
  PortReservation reservation = reserve_ports(options.host, static_cast<int>(tasks.size()));
  if (!reservation.error.empty()) {
    message(reservation.error);
    return kLauncherError;
  }
  // IPv6 literals need brackets in "host:port".
  const bool bracket = options.host.find(':') != std::string::npos && options.host.front() != '[';
  std::vector<std::string> addresses;
  for (const int port : reservation.ports) {
    addresses.push_back(bracket ? fmt::format("[{}]:{}", options.host, port)
                                : fmt::format("{}:{}", options.host, port));
  }
  const nlohmann::json cluster = cluster_json(tasks, addresses);
  const std::vector<std::string> base = base_environment(options.local_replicas.has_value());
  // The CPUs the training threads share, when no one said how many OpenMP may take.
  std::optional<int> omp_threads;
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    omp_threads = std::max(
        1, strata::detail::usable_cpus() / (options.workers * options.local_replicas.value_or(1)));
  std::vector<std::vector<std::string>> environments;
  for (const TaskId& task : tasks) {
    auto env = base;
    env.push_back("TF_CONFIG=" + tf_config(cluster, task));
    if (!task.is_ps()) env.push_back(fmt::format("STRATA_LAUNCH_RANK={}", task.rank));
    env.push_back(fmt::format("STRATA_LAUNCH_WORLD_SIZE={}", options.workers));
    if (options.local_replicas) {
      env.push_back(fmt::format("STRATA_LOCAL_REPLICAS={}", *options.local_replicas));
    }
    if (omp_threads) env.push_back(fmt::format("OMP_NUM_THREADS={}", *omp_threads));
    environments.push_back(std::move(env));
  }

  int wake[2];
  if (!make_pipe(wake, true)) {
    message(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
    return kLauncherError;
  }
  g_wake_write_fd = wake[1];
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (const int signal : kHandledSignals) {
    // A SIGINT ignored on entry stays ignored: a shell without job control does that to
    // background commands so that Ctrl-C at the terminal spares them.
    struct sigaction inherited {};
    if (signal == SIGINT && ::sigaction(SIGINT, nullptr, &inherited) == 0 &&
        inherited.sa_handler == SIG_IGN) {
      continue;
    }
    ::sigaction(signal, &action, nullptr);
  }
  // A closed stdout must not kill the launcher and orphan its workers.
  ::signal(SIGPIPE, SIG_IGN);

  Launcher launcher(options, wake[0]);
  return launcher.run(tasks, std::move(environments), reservation);
}
