// benchmarks/perf/peers/fork_ranks.hpp — a group of ranks as forked child processes, for a peer
// that starts its own ranks (strata-perf-gloo).
//
// The caller forks before any library or thread state exists; child r binds itself to its CPU
// when ForkOptions::binding gives it one (bind.hpp), runs `body(r)` and exits with its result. Each
// child dies with the parent (PR_SET_PDEATHSIG). The parent waits:
//   - the result is 0 when every rank exits 0, else the first non-zero exit status; a rank killed
//     by a signal counts as failure (kExitFailure);
//   - after a first failure (anything but 0 or "wrong values") the others get `grace` to fail
//     too (a dead peer breaks their connections, so they usually do at once), then SIGKILL;
//   - past `deadline` every rank is killed and the result is kExitFailure.
// POSIX (Linux) only: fork, waitpid, prctl.
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "../bind.hpp"
#include "peer_options.hpp"

namespace strata::perf::peers {

struct ForkOptions {
  std::chrono::milliseconds deadline{std::chrono::minutes(30)};
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  const char* tool = "peer";  ///< prefix of the parent's messages
  Binding binding = Binding::none;
};

/// Runs `body(rank)` in `ranks` child processes and returns the group's exit status (above).
inline int fork_ranks(int ranks, const std::function<int(int)>& body, const ForkOptions& options) {
  using Clock = std::chrono::steady_clock;
  std::fflush(nullptr);  // the children must not write the parent's buffered output again
  const pid_t parent = ::getpid();
  const std::vector<int> cpus = allowed_cpus();
  std::vector<pid_t> pids(static_cast<std::size_t>(ranks), -1);
  bool killed = false;
  auto kill_all = [&] {
    killed = true;
    for (const pid_t pid : pids)
      if (pid > 0) ::kill(pid, SIGKILL);
  };
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      fmt::print(stderr, "{}: fork: {}\n", options.tool, std::strerror(errno));
      kill_all();
      for (const pid_t started : pids)
        if (started > 0) ::waitpid(started, nullptr, 0);
      return kExitFailure;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(kExitFailure);  // the parent died before prctl
      int status = kExitFailure;
      try {
        if (const auto cpu = cpu_of_rank(options.binding, r, ranks, cpus);
            cpu && !bind_calling_thread(*cpu))
          throw std::runtime_error(fmt::format("cannot bind rank {} to CPU {}", r, *cpu));
        status = body(r);
      } catch (const std::exception& error) {
        fmt::print(stderr, "{}: {}\n", options.tool, error.what());
        status = kExitFailure;
      } catch (...) {
        status = kExitFailure;
      }
      std::fflush(nullptr);
      ::_exit(status);  // not exit(): the parent's atexit handlers and statics are not ours
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }

  const auto deadline = Clock::now() + options.deadline;
  std::optional<Clock::time_point> kill_at;
  int result = 0;
  int running = ranks;
  while (running > 0) {
    int wait_status = 0;
    const pid_t pid = ::waitpid(-1, &wait_status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;  // no children left
    if (pid > 0) {
      int rank = -1;
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (pids[i] == pid) {
          rank = static_cast<int>(i);
          pids[i] = -1;
        }
      if (rank < 0) continue;
      --running;
      int status = 0;
      if (WIFEXITED(wait_status)) {
        status = WEXITSTATUS(wait_status);
      } else {
        if (!killed)  // a signal we did not send
          fmt::print(stderr, "{}: rank {} was killed by signal {}\n", options.tool, rank,
                     WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
        status = kExitFailure;
      }
      if (status != 0 && result == 0) {
        result = status;
        if (status != kExitWrongValues) kill_at = Clock::now() + options.grace;
      }
      continue;
    }
    const auto now = Clock::now();
    if (!killed && now >= deadline) {
      fmt::print(stderr, "{}: the ranks did not finish within {} s; killing them\n", options.tool,
                 std::chrono::duration_cast<std::chrono::seconds>(options.deadline).count());
      kill_all();
      if (result == 0) result = kExitFailure;
    } else if (!killed && kill_at && now >= *kill_at) {
      kill_all();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace strata::perf::peers
