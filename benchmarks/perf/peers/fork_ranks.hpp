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

#include <chrono>
#include <functional>

#include <perf/bind.hpp>

namespace strata::perf::peers {

struct ForkOptions {
  std::chrono::milliseconds deadline{std::chrono::minutes(30)};
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  const char* tool = "peer";  ///< prefix of the parent's messages
  Binding binding = Binding::none;
};

/// Runs `body(rank)` in `ranks` child processes and returns the group's exit status (above).
int fork_ranks(int ranks, const std::function<int(int)>& body, const ForkOptions& options);

}  // namespace strata::perf::peers
