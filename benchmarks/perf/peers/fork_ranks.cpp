// benchmarks/perf/peers/fork_ranks.cpp — a peer's ranks as forked children (fork_ranks.hpp).
#include <perf/peers/fork_ranks.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <perf/peers/peer_options.hpp>

namespace strata::perf::peers {

namespace {

using Clock = std::chrono::steady_clock;

// Child `rank`: binds itself, runs `body` and exits with its result, never returning.
[[noreturn]] void run_child(int rank, int ranks, pid_t parent, const std::vector<int>& cpus,
                            const std::function<int(int)>& body, const ForkOptions& options) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(kExitFailure);  // the parent died before prctl
  int status = kExitFailure;
  try {
    if (const auto cpu = cpu_of_rank(options.binding, rank, ranks, cpus);
        cpu && !bind_calling_thread(*cpu))
      throw std::runtime_error(fmt::format("cannot bind rank {} to CPU {}", rank, *cpu));
    status = body(rank);
  } catch (const std::exception& error) {
    fmt::print(stderr, "{}: {}\n", options.tool, error.what());
    status = kExitFailure;
  } catch (...) {
    status = kExitFailure;
  }
  std::fflush(nullptr);
  ::_exit(status);  // not exit(): the parent's atexit handlers and statics are not ours
}

// The children, and what the parent decided about them.
struct Group {
  std::vector<pid_t> pids;
  bool killed = false;

  void kill_all() {
    killed = true;
    for (const pid_t pid : pids)
      if (pid > 0) ::kill(pid, SIGKILL);
  }
  // The rank of child `pid`, which is forgotten; -1 for a process that is not one of them.
  int reaped(pid_t pid) {
    int rank = -1;
    for (std::size_t i = 0; i < pids.size(); ++i)
      if (pids[i] == pid) {
        rank = static_cast<int>(i);
        pids[i] = -1;
      }
    return rank;
  }
};

// The exit status a rank's wait status counts as; reports a signal the parent did not send.
int rank_status(const Group& group, int rank, int wait_status, const ForkOptions& options) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (!group.killed)
    fmt::print(stderr, "{}: rank {} was killed by signal {}\n", options.tool, rank,
               WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
  return kExitFailure;
}

int wait_for_ranks(Group& group, int ranks, const ForkOptions& options) {
  const auto deadline = Clock::now() + options.deadline;
  std::optional<Clock::time_point> kill_at;
  int result = 0;
  int running = ranks;
  while (running > 0) {
    int wait_status = 0;
    const pid_t pid = ::waitpid(-1, &wait_status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;  // no children left
    if (pid > 0) {
      const int rank = group.reaped(pid);
      if (rank < 0) continue;
      --running;
      const int status = rank_status(group, rank, wait_status, options);
      if (status != 0 && result == 0) {
        result = status;
        if (status != kExitWrongValues) kill_at = Clock::now() + options.grace;
      }
      continue;
    }
    const auto now = Clock::now();
    if (!group.killed && now >= deadline) {
      fmt::print(stderr, "{}: the ranks did not finish within {} s; killing them\n", options.tool,
                 std::chrono::duration_cast<std::chrono::seconds>(options.deadline).count());
      group.kill_all();
      if (result == 0) result = kExitFailure;
    } else if (!group.killed && kill_at && now >= *kill_at) {
      group.kill_all();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace

int fork_ranks(int ranks, const std::function<int(int)>& body, const ForkOptions& options) {
  std::fflush(nullptr);  // the children must not write the parent's buffered output again
  const pid_t parent = ::getpid();
  const std::vector<int> cpus = allowed_cpus();
  Group group;
  group.pids.assign(static_cast<std::size_t>(ranks), -1);
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      fmt::print(stderr, "{}: fork: {}\n", options.tool, std::strerror(errno));
      group.kill_all();
      for (const pid_t started : group.pids)
        if (started > 0) ::waitpid(started, nullptr, 0);
      return kExitFailure;
    }
    if (pid == 0) run_child(r, ranks, parent, cpus, body, options);
    group.pids[static_cast<std::size_t>(r)] = pid;
  }
  return wait_for_ranks(group, ranks, options);
}

}  // namespace strata::perf::peers
