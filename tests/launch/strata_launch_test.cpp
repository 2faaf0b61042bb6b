// Tests for tools/launch/strata_launch.cpp: they run the real strata-launch binary
// (STRATA_LAUNCH_PROGRAM, set by tools/launch/CMakeLists.txt) with `sh -c` workers and check
// TF_CONFIG and the environment, the "[rank] " output prefixes, failure propagation, signal
// forwarding with the SIGTERM -> SIGKILL escalation, and the exit statuses; with --chief and
// --ps, the cluster every task sees and how ps tasks end. Each run is bounded
// (kRunLimit); timings are checked against generous bounds for a loaded 2-core machine.
#include <doctest/doctest.h>

#ifdef STRATA_LAUNCH_PROGRAM

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <strata/detail/usable_cpus.hpp>

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kRunLimit = 30s;  // a launcher still running after this is a failed test

// Environment edits for the launcher: a value sets the variable, nullopt removes it.
using EnvEdits = std::vector<std::pair<std::string, std::optional<std::string>>>;

struct Result {
  int status = -1;  // exit status, or 128+signal
  std::string out, err;
  std::chrono::duration<double> elapsed{};
};

// One strata-launch process with its stdout and stderr captured.
class Launch {
 public:
  explicit Launch(std::vector<std::string> args, const EnvEdits& edits = {}) {
    std::vector<std::string> env;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string_view text = *entry;
      const auto name = text.substr(0, text.find('='));
      const bool edited = std::any_of(edits.begin(), edits.end(),
                                      [&](const auto& edit) { return edit.first == name; });
      if (!edited) env.emplace_back(text);
    }
    for (const auto& [name, value] : edits) {
      if (value) env.push_back(name + "=" + *value);
    }
    args.insert(args.begin(), STRATA_LAUNCH_PROGRAM);
    std::vector<char*> argv, envp;
    for (auto& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    for (auto& entry : env)
      envp.push_back(entry.data());
    envp.push_back(nullptr);

    int out[2], err[2];
    REQUIRE(::pipe(out) == 0);
    REQUIRE(::pipe(err) == 0);
    for (const int fd : {out[0], out[1], err[0], err[1]})
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    start_ = Clock::now();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      // The launcher keeps a SIGINT that is ignored on entry ignored; the test runner may have
      // been started that way.
      for (const int signal : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD})
        ::signal(signal, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }

  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  ~Launch() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    for (const int fd : {out_fd_, err_fd_})
      if (fd >= 0) ::close(fd);
  }

  pid_t pid() const { return pid_; }

  // Reads output until `done(out, err)` holds; false if the launcher exits or time runs out.
  bool wait_for_output(const std::function<bool(const std::string&, const std::string&)>& done,
                       std::chrono::milliseconds limit = 10s) {
    const auto deadline = Clock::now() + limit;
    while (!done(result_.out, result_.err)) {
      if (exited_ || Clock::now() >= deadline) return false;
      step();
    }
    return true;
  }

  // Waits for the launcher to exit (killing it after kRunLimit) and returns what it did.
  Result wait() {
    const auto deadline = start_ + kRunLimit;
    while (!exited_ && Clock::now() < deadline)
      step();
    if (!exited_) {
      FAIL_CHECK("strata-launch did not exit within the limit");
      ::kill(pid_, SIGKILL);
      while (!exited_)
        step();
    }
    return result_;
  }

 private:
  void step() {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    ::poll(fds, 2, 20);
    drain();
    int status = 0;
    if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      result_.elapsed = Clock::now() - start_;
      result_.status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
      // Its descriptors are closed now: read to the end.
      for (const int fd : {out_fd_, err_fd_})
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      drain();
    }
  }

  void drain() {
    for (auto [fd, text] : {std::pair{out_fd_, &result_.out}, std::pair{err_fd_, &result_.err}}) {
      if (!exited_) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      char buffer[4096];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof buffer)) > 0)
        text->append(buffer, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool exited_ = false;
  Clock::time_point start_;
  Result result_;
};

Result run(std::vector<std::string> args, const EnvEdits& edits = {}) {
  return Launch(std::move(args), edits).wait();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);)
    lines.push_back(line);
  return lines;
}

// "[i] text" lines: rank -> texts in order. Lines without a prefix go to rank -1. (Parsed by
// hand: std::regex recurses per character and overflows the stack on 64 KiB lines.)
std::map<int, std::vector<std::string>> by_rank(const std::string& text) {
  std::map<int, std::vector<std::string>> result;
  for (const auto& line : lines_of(text)) {
    const auto close = line.find("] ");
    int rank = -1;
    if (line.starts_with("[") && close != std::string::npos && close > 1 &&
        line.find_first_not_of("0123456789", 1) == close) {
      rank = std::stoi(line.substr(1, close - 1));
    }
    result[rank].push_back(rank < 0 ? line : line.substr(close + 2));
  }
  return result;
}

bool contains(const std::string& text, std::string_view needle) {
  return text.find(needle) != std::string::npos;
}

// A fresh directory under the temp dir, removed at the end of the test.
struct TempDir {
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "strata-launch-XXXXXX");
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(std::string_view name) const { return (path / name).string(); }
  std::filesystem::path path;
};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

// Alive and not a zombie (an orphan's zombie lingers until its new parent reaps it).
bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return ::kill(pid, 0) == 0 || errno == EPERM;
  const auto paren = content.rfind(')');
  return paren == std::string::npos || paren + 2 >= content.size() || content[paren + 2] != 'Z';
}

// Whether all of `pids` are gone within `limit` (a SIGKILLed process may take a moment).
bool all_gone(const std::vector<std::string>& pids, std::chrono::milliseconds limit = 3s) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    const bool any = std::any_of(pids.begin(), pids.end(), [](const std::string& pid) {
      return process_alive(static_cast<pid_t>(std::stol(pid)));
    });
    if (!any) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Blocks rank 1 until `file` has `lines` lines (at most ~4 s), so the others are set up.
std::string wait_for_lines(const std::string& file, int lines) {
  return "i=0; while [ \"$(wc -l < '" + file + "')\" -lt " + std::to_string(lines) +
         " ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done; ";
}

}  // namespace

TEST_CASE("every worker gets TF_CONFIG for an N-worker cluster on distinct ports") {
  const auto result = run({"-n", "3", "--", "sh", "-c", "echo \"$TF_CONFIG\""});
  CHECK(result.status == 0);
  CHECK(result.err.empty());
  const auto lines = by_rank(result.out);
  REQUIRE(lines.size() == 3);
  std::optional<nlohmann::json> first_workers;
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(rank);
    REQUIRE(lines.count(rank) == 1);
    REQUIRE(lines.at(rank).size() == 1);
    const auto config = nlohmann::json::parse(lines.at(rank)[0]);
    CHECK(config["task"]["type"] == "worker");
    CHECK(config["task"]["index"] == rank);
    const auto& workers = config["cluster"]["worker"];
    REQUIRE(workers.is_array());
    REQUIRE(workers.size() == 3);
    CHECK(config["cluster"].size() == 1);  // worker 0 is the chief; no chief job
    std::set<int> ports;
    for (const auto& worker : workers) {
      const auto address = worker.get<std::string>();
      REQUIRE(address.starts_with("127.0.0.1:"));
      const int port = std::stoi(address.substr(10));
      CHECK(port > 0);
      CHECK(port < 65536);
      ports.insert(port);
    }
    CHECK(ports.size() == 3);
    if (first_workers) CHECK(workers == *first_workers);
    first_workers = workers;
  }
}

TEST_CASE("stdout and stderr lines are prefixed with the rank; a last partial line is printed") {
  const auto result =
      run({"-n", "2", "--", "sh", "-c", "echo out; echo err >&2; echo two; printf partial"});
  CHECK(result.status == 0);
  const auto out = by_rank(result.out);
  const auto err = by_rank(result.err);
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    CHECK(out.at(rank) == std::vector<std::string>{"out", "two", "partial"});
    CHECK(err.at(rank) == std::vector<std::string>{"err"});
  }
  CHECK(out.count(-1) == 0);
  CHECK(err.count(-1) == 0);
}

TEST_CASE("a line completed by a read that makes it longer than 64 KiB is still cut") {
  // 30000 bytes arrive first and wait for their newline; the next read brings 50000 more and
  // the newline, so the complete line (80000 bytes) is found at once.
  // The second part goes out in one write (cat of a file), so one read takes it whole.
  const auto result =
      run({"-n", "1", "--", "sh", "-c",
           "f=$(mktemp) && head -c 50000 /dev/zero | tr '\\0' y >\"$f\" && echo >>\"$f\" && "
           "head -c 30000 /dev/zero | tr '\\0' x && sleep 0.3 && cat \"$f\"; rm -f \"$f\""});
  CHECK(result.status == 0);
  const auto out = by_rank(result.out);
  REQUIRE(out.count(0) == 1);
  const auto& lines = out.at(0);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].size() == 64 * 1024);
  CHECK(lines[1].size() == 80000 - 64 * 1024);
  CHECK(lines[0].find_first_not_of("xy") == std::string::npos);
  CHECK(lines[1].find_first_not_of('y') == std::string::npos);
}

TEST_CASE("a line longer than 64 KiB is printed in prefixed pieces") {
  const auto result =
      run({"-n", "1", "--", "sh", "-c", "head -c 150000 /dev/zero | tr '\\0' x; echo; echo after"});
  CHECK(result.status == 0);
  const auto out = by_rank(result.out);
  REQUIRE(out.count(0) == 1);
  const auto& lines = out.at(0);
  REQUIRE(lines.size() >= 4);
  CHECK(lines.back() == "after");
  std::size_t total = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    CHECK(lines[i].size() <= 64 * 1024);
    CHECK(lines[i].find_first_not_of('x') == std::string::npos);
    total += lines[i].size();
  }
  CHECK(total == 150000);
}

TEST_CASE("--local-replicas and the rank variables; other launchers' variables are removed") {
  const EnvEdits inherited = {{"RANK", "7"},
                              {"WORLD_SIZE", "9"},
                              {"LOCAL_RANK", "1"},
                              {"OMPI_COMM_WORLD_RANK", "3"},
                              {"SLURM_PROCID", "4"},
                              {"TF_CONFIG", "{}"},
                              {"STRATA_LOCAL_REPLICAS", std::nullopt},
                              {"STRATA_TEST_KEEP", "kept"}};
  const std::string script =
      "echo \"L=${STRATA_LOCAL_REPLICAS-unset} R=${RANK-unset} W=${WORLD_SIZE-unset} "
      "LR=${LOCAL_RANK-unset} O=${OMPI_COMM_WORLD_RANK-unset} S=${SLURM_PROCID-unset} "
      "K=${STRATA_TEST_KEEP-unset} N=$STRATA_LAUNCH_RANK/$STRATA_LAUNCH_WORLD_SIZE\"; "
      "[ \"$TF_CONFIG\" != '{}' ]";
  SUBCASE("with --local-replicas 2") {
    const auto result =
        run({"-n", "2", "--local-replicas", "2", "--", "sh", "-c", script}, inherited);
    CHECK(result.status == 0);
    const auto out = by_rank(result.out);
    for (int rank = 0; rank < 2; ++rank) {
      CHECK(out.at(rank) ==
            std::vector<std::string>{"L=2 R=unset W=unset LR=unset O=unset S=unset K=kept N=" +
                                     std::to_string(rank) + "/2"});
    }
  }
  SUBCASE("without --local-replicas") {
    const auto result = run({"-n", "1", "--", "sh", "-c", script}, inherited);
    CHECK(result.status == 0);
    CHECK(
        by_rank(result.out).at(0) ==
        std::vector<std::string>{"L=unset R=unset W=unset LR=unset O=unset S=unset K=kept N=0/1"});
  }
}

TEST_CASE("OMP_NUM_THREADS shares the CPUs among the tasks' threads, unless the user set it") {
  const std::string script = "echo \"T=${OMP_NUM_THREADS-unset}\"";
  SUBCASE("unset: the usable CPUs over the replicas of every task, at least 1") {
    for (const auto& [n, k] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{2, 3}}) {
      CAPTURE(n);
      CAPTURE(k);
      const auto result = run({"-n", std::to_string(n), "--local-replicas", std::to_string(k), "--",
                               "sh", "-c", script},
                              {{"OMP_NUM_THREADS", std::nullopt}});
      REQUIRE(result.status == 0);
      const int expected = std::max(1, strata::detail::usable_cpus() / (n * k));
      const auto out = by_rank(result.out);
      for (int rank = 0; rank < n; ++rank)
        CHECK(out.at(rank) == std::vector<std::string>{"T=" + std::to_string(expected)});
    }
  }
  SUBCASE("set: kept") {
    const auto result =
        run({"-n", "2", "--", "sh", "-c", script}, {{"OMP_NUM_THREADS", std::string("5")}});
    REQUIRE(result.status == 0);
    const auto out = by_rank(result.out);
    for (int rank = 0; rank < 2; ++rank)
      CHECK(out.at(rank) == std::vector<std::string>{"T=5"});
  }
}

TEST_CASE("the first failing worker stops the others and sets the exit status") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  // Ranks 0 and 2 record the pid of a 60 s sleep; rank 1 fails once both have.
  const std::string script = "if [ \"$STRATA_LAUNCH_RANK\" = 1 ]; then " + wait_for_lines(pids, 2) +
                             "echo failing; exit 3; fi; sleep 60 & echo $! >> '" + pids + "'; wait";
  const auto result = run({"-n", "3", "--", "sh", "-c", script});
  CHECK(result.status == 3);
  CHECK(result.elapsed < 5s);  // the others die of SIGTERM; the 5 s grace is never used
  CHECK(contains(result.err, "strata-launch: rank 1 exited with status 3\n"));
  CHECK_FALSE(contains(result.err, "SIGKILL"));
  CHECK(by_rank(result.out).at(1) == std::vector<std::string>{"failing"});
  const auto sleepers = read_lines(pids);
  CHECK(sleepers.size() == 2);
  CHECK(all_gone(sleepers));
}

TEST_CASE("a worker that ignores SIGTERM is killed after --grace") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  const std::string script = "if [ \"$STRATA_LAUNCH_RANK\" = 1 ]; then " + wait_for_lines(pids, 1) +
                             "exit 4; fi; trap '' TERM; echo $$ >> '" + pids +
                             "'; while :; do sleep 0.1; done";
  const auto result = run({"-n", "2", "--grace", "1", "--", "sh", "-c", script});
  CHECK(result.status == 4);
  CHECK(result.elapsed >= 1s);
  CHECK(result.elapsed < 6s);
  CHECK(contains(result.err, "strata-launch: rank 1 exited with status 4\n"));
  CHECK(contains(result.err, "strata-launch: sending SIGKILL to rank 0\n"));
  CHECK(all_gone(read_lines(pids)));
}

TEST_CASE("a worker killed by a signal: exit status 128+signal and the signal's name") {
  const auto result = run({"-n", "2", "--", "sh", "-c",
                           "if [ \"$STRATA_LAUNCH_RANK\" = 0 ]; then kill -KILL $$; fi; sleep 60"});
  CHECK(result.status == 137);
  CHECK(result.elapsed < 5s);
  CHECK(contains(result.err, "strata-launch: rank 0 killed by signal 9 (SIGKILL)\n"));
}

TEST_CASE("SIGINT and SIGTERM to the launcher are forwarded once, then SIGKILL after --grace") {
  TempDir dir;
  const auto marks = dir.file("marks");
  // Workers note each SIGINT, ignore SIGTERM, and keep running: only SIGKILL ends them.
  const std::string script = "trap 'echo $STRATA_LAUNCH_RANK >> \"" + marks +
                             "\"' INT; trap '' TERM; echo ready; while :; do sleep 0.1; done";
  const auto both_ready = [](const std::string& out, const std::string&) {
    return contains(out, "[0] ready\n") && contains(out, "[1] ready\n");
  };

  SUBCASE("SIGINT") {
    Launch launch({"-n", "2", "--grace", "1", "--", "sh", "-c", script});
    REQUIRE(launch.wait_for_output(both_ready));
    const auto signalled = Clock::now();
    REQUIRE(::kill(launch.pid(), SIGINT) == 0);
    const auto result = launch.wait();
    const auto after_signal = Clock::now() - signalled;
    CHECK(result.status == 130);
    CHECK(after_signal >= 1s);
    CHECK(after_signal < 6s);
    CHECK(contains(result.err, "received signal 2 (SIGINT)"));
    CHECK(contains(result.err, "strata-launch: sending SIGKILL to ranks 0, 1\n"));
    auto received = read_lines(marks);
    std::sort(received.begin(), received.end());
    CHECK(received == std::vector<std::string>{"0", "1"});
    CHECK_FALSE(contains(result.err, "summary"));  // nothing failed by itself
  }
  SUBCASE("SIGTERM") {
    Launch launch({"-n", "2", "--grace", "1", "--", "sh", "-c", script});
    REQUIRE(launch.wait_for_output(both_ready));
    REQUIRE(::kill(launch.pid(), SIGTERM) == 0);
    const auto result = launch.wait();
    CHECK(result.status == 143);
    CHECK(contains(result.err, "received signal 15 (SIGTERM)"));
    CHECK(contains(result.err, "strata-launch: sending SIGKILL to ranks 0, 1\n"));
    CHECK(read_lines(marks).empty());
  }
}

TEST_CASE("a second SIGINT kills the workers without waiting for --grace") {
  const std::string script = "trap '' INT TERM; echo ready; while :; do sleep 0.1; done";
  Launch launch({"-n", "2", "--grace", "60", "--", "sh", "-c", script});
  REQUIRE(launch.wait_for_output([](const std::string& out, const std::string&) {
    return contains(out, "[0] ready\n") && contains(out, "[1] ready\n");
  }));
  REQUIRE(::kill(launch.pid(), SIGINT) == 0);
  REQUIRE(launch.wait_for_output([](const std::string&, const std::string& err) {
    return contains(err, "received signal 2 (SIGINT)");
  }));
  REQUIRE(::kill(launch.pid(), SIGINT) == 0);
  const auto result = launch.wait();
  CHECK(result.status == 130);
  CHECK(result.elapsed < 10s);
  CHECK(contains(result.err, "strata-launch: sending SIGKILL to ranks 0, 1\n"));
}

TEST_CASE("usage errors exit 2 with a message and the help text") {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"--", "true"},
      {"-n", "0", "--", "true"},
      {"-n", "-1", "--", "true"},
      {"-n", "two", "--", "true"},
      {"-n", "2x", "--", "true"},
      {"-n"},
      {"-n", "2", "true"},
      {"-n", "2", "--"},
      {"-n", "2", "--bogus", "--", "true"},
      {"-n", "2", "--local-replicas", "0", "--", "true"},
      {"-n", "2", "--grace", "-1", "--", "true"},
      {"-n", "2", "--grace", "soon", "--", "true"},
      {"-n", "2", "--ps", "-1", "--", "true"},
      {"-n", "2", "--ps", "x", "--", "true"},
      {"-n", "2", "--ps=1x", "--", "true"},
      {"-n", "2", "--ps", "--", "true"},
      {"-n", "2", "--chief=yes", "--", "true"},
      {"-n", "2", "--ps-grace", "-1", "--", "true"},
      {"--chief", "--ps", "1", "--", "true"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& arg : args)
      joined += arg + " ";
    CAPTURE(joined);
    const auto result = run(args);
    CHECK(result.status == 2);
    CHECK(result.out.empty());
    CHECK(result.err.starts_with("strata-launch: "));
    CHECK(contains(result.err, "usage: strata-launch -n N"));
  }
}

TEST_CASE("--help prints the usage on stdout; the option forms with '=' and -nN work") {
  const auto help = run({"--help"});
  CHECK(help.status == 0);
  CHECK(help.out.starts_with("usage: strata-launch -n N"));
  CHECK(contains(help.out, "--chief"));
  CHECK(contains(help.out, "--ps M"));
  CHECK(contains(help.out, "--ps-grace SECONDS"));
  const auto result = run({"-n2", "--grace=0.5", "--local-replicas=3", "--host=127.0.0.1", "--",
                           "sh", "-c", "echo $STRATA_LOCAL_REPLICAS"});
  CHECK(result.status == 0);
  const auto out = by_rank(result.out);
  CHECK(out.at(0) == std::vector<std::string>{"3"});
  CHECK(out.at(1) == std::vector<std::string>{"3"});
}

TEST_CASE("a program that cannot be executed: status 127 and a message") {
  const auto result = run({"-n", "2", "--", "/nonexistent/strata-no-such-program", "arg"});
  CHECK(result.status == 127);
  CHECK(contains(result.err,
                 "strata-launch: cannot run /nonexistent/strata-no-such-program: "
                 "No such file or directory\n"));
  CHECK(contains(result.err, "exited with status 127\n"));
}

namespace {

// Shell text that waits (at most 4 s) until every pid listed in `file` (one per line) is gone
// or, with `state` "T", stopped.
std::string wait_until_peers(const std::string& file, int lines, std::string_view state = "gone") {
  const std::string waiting =
      state == "T" ? "! grep -q ') T' /proc/$p/stat 2>/dev/null" : "kill -0 $p 2>/dev/null";
  return wait_for_lines(file, lines) + "i=0; for p in $(cat '" + file + "'); do while " + waiting +
         " && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done; done; ";
}

// The summary line of `rank` ("strata-launch:   rank R: ...").
std::string summary_line(const std::string& err, int rank) {
  const std::string prefix = "strata-launch:   rank " + std::to_string(rank) + ": ";
  const auto at = err.find(prefix);
  if (at == std::string::npos) return "";
  return err.substr(at + prefix.size(), err.find('\n', at) - at - prefix.size());
}

}  // namespace

TEST_CASE("a worker killed by a signal is the root cause, however its peers end") {
  // Rank 1 is SIGKILLed; rank 0 notices, takes a moment to raise (as a survivor of a strata
  // group does) and exits with strata's peer-failure status.
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  const std::string script = "if [ \"$STRATA_LAUNCH_RANK\" = 1 ]; then echo $$ >> '" + pids +
                             "'; kill -KILL $$; fi; " + wait_until_peers(pids, 1) +
                             "sleep 0.3; echo 'PeerFailureError: rank 1 closed its connections' "
                             ">&2; exit 69";
  const auto result = run({"-n", "2", "--", "sh", "-c", script});
  CHECK(result.status == 137);
  CHECK(result.elapsed < 5s);
  // The survivor's own error reached the user: it was given time to say it.
  CHECK(by_rank(result.err).at(0) ==
        std::vector<std::string>{"PeerFailureError: rank 1 closed its connections"});
  CHECK(contains(result.err, "strata-launch: summary: the failure started at rank 1\n"));
  CHECK(summary_line(result.err, 1) == "killed by signal 9 (SIGKILL) (root cause)");
  CHECK(summary_line(result.err, 0) ==
        "exited with status 69 (PeerFailureError), after rank 1 failed");
}

TEST_CASE("two workers killed at once are both named, and the peers' echoes after them") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  const std::string script = "if [ \"$STRATA_LAUNCH_RANK\" != 0 ]; then echo $$ >> '" + pids +
                             "'; " + wait_for_lines(pids, 2) + "kill -KILL $$; fi; " +
                             wait_until_peers(pids, 2) + "exit 69";
  const auto result = run({"-n", "3", "--", "sh", "-c", script});
  CHECK(result.status == 137);
  CHECK(summary_line(result.err, 1) == "killed by signal 9 (SIGKILL) (root cause)");
  CHECK(summary_line(result.err, 2) == "killed by signal 9 (SIGKILL) (root cause)");
  CHECK(contains(summary_line(result.err, 0), "exited with status 69 (PeerFailureError), after "));
  CHECK((contains(result.err, "the failure started at rank 1, rank 2\n") ||
         contains(result.err, "the failure started at rank 2, rank 1\n")));
}

TEST_CASE("a stopped worker whose peers time out is named as the stalled one") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  const std::string script = "if [ \"$STRATA_LAUNCH_RANK\" = 1 ]; then echo $$ >> '" + pids +
                             "'; kill -STOP $$; exit 0; fi; " + wait_until_peers(pids, 1, "T") +
                             "echo 'TimeoutError: rank 1 did not answer' >&2; exit 75";
  const auto result = run({"-n", "2", "--grace", "1", "--", "sh", "-c", script});
  CHECK(result.status == 75);  // the first failure's: the stalled rank was ended by the launcher
  CHECK(result.elapsed < 6s);
  CHECK(contains(result.err, "strata-launch: summary: the failure started at rank 1\n"));
  CHECK(contains(summary_line(result.err, 1), "stopped (SIGSTOP) while its peers waited for it"));
  CHECK(summary_line(result.err, 0) == "exited with status 75 (TimeoutError), after rank 1 failed");
  CHECK(all_gone(read_lines(pids)));
}

namespace {

// "[2] text" and "[ps 1] text" lines: "2" or "ps 1" -> texts in order. Lines without such a
// prefix go to "".
std::map<std::string, std::vector<std::string>> by_task(const std::string& text) {
  std::map<std::string, std::vector<std::string>> result;
  for (const auto& line : lines_of(text)) {
    const auto close = line.find("] ");
    std::string label;
    if (line.starts_with("[") && close != std::string::npos && close > 1) {
      const std::string inside = line.substr(1, close - 1);
      const std::string digits = inside.starts_with("ps ") ? inside.substr(3) : inside;
      if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos)
        label = inside;
    }
    result[label].push_back(label.empty() ? line : line.substr(close + 2));
  }
  return result;
}

// The summary line of a task named "rank 2" or "ps 0".
std::string summary_line_of(const std::string& err, const std::string& name) {
  const std::string prefix = "strata-launch:   " + name + ": ";
  const auto at = err.find(prefix);
  if (at == std::string::npos) return "";
  return err.substr(at + prefix.size(), err.find('\n', at) - at - prefix.size());
}

// Every task prints its TF_CONFIG, then its rank variables.
const std::string kPrintConfig =
    "echo \"$TF_CONFIG\"; echo \"R=${STRATA_LAUNCH_RANK-unset} W=$STRATA_LAUNCH_WORLD_SIZE\"";

// The TF_CONFIG and rank line of each task (label as in by_task), checking that every task sees
// the same cluster, on distinct ports of 127.0.0.1, with `jobs` tasks per job.
std::map<std::string, std::pair<nlohmann::json, std::string>> configs_of(
    const Result& result, const std::map<std::string, std::size_t>& jobs) {
  std::map<std::string, std::pair<nlohmann::json, std::string>> configs;
  std::optional<nlohmann::json> first_cluster;
  for (const auto& [label, lines] : by_task(result.out)) {
    CAPTURE(label);
    REQUIRE(lines.size() == 2);
    const auto config = nlohmann::json::parse(lines[0]);
    const auto& cluster = config["cluster"];
    CHECK(cluster.size() == jobs.size());
    std::set<int> ports;
    std::size_t tasks = 0;
    for (const auto& [job, count] : jobs) {
      CAPTURE(job);
      REQUIRE(cluster.contains(job));
      REQUIRE(cluster[job].is_array());
      CHECK(cluster[job].size() == count);
      for (const auto& task : cluster[job]) {
        const auto address = task.get<std::string>();
        REQUIRE(address.starts_with("127.0.0.1:"));
        ports.insert(std::stoi(address.substr(10)));
        ++tasks;
      }
    }
    CHECK(ports.size() == tasks);
    if (first_cluster) CHECK(cluster == *first_cluster);
    first_cluster = cluster;
    configs[label] = {config, lines[1]};
  }
  return configs;
}

}  // namespace

// Each (output label, task type, task index, rank line) of `expected` is one task's.
template <class Configs>
void check_tasks(
    const Configs& configs,
    const std::vector<std::tuple<std::string, std::string, int, std::string>>& expected) {
  for (const auto& [label, type, index, ranks] : expected) {
    CAPTURE(label);
    REQUIRE(configs.count(label) == 1);
    const auto& [config, rank_line] = configs.at(label);
    CHECK(config["task"]["type"] == type);
    CHECK(config["task"]["index"] == index);
    CHECK(rank_line == ranks);
  }
}

TEST_CASE("--ps M: M ps tasks of the same program; every task's TF_CONFIG has both jobs") {
  const auto result = run({"-n", "2", "--ps", "2", "--", "sh", "-c", kPrintConfig});
  CHECK(result.status == 0);
  CHECK(result.err.empty());
  const auto configs = configs_of(result, {{"worker", 2}, {"ps", 2}});
  REQUIRE(configs.size() == 4);
  const std::vector<std::tuple<std::string, std::string, int, std::string>> expected = {
      {"0", "worker", 0, "R=0 W=2"},
      {"1", "worker", 1, "R=1 W=2"},
      {"ps 0", "ps", 0, "R=unset W=2"},
      {"ps 1", "ps", 1, "R=unset W=2"}};
  check_tasks(configs, expected);
}

TEST_CASE("--ps 0 is the default: the cluster has only the worker job") {
  const auto result = run({"-n", "2", "--ps", "0", "--", "sh", "-c", kPrintConfig});
  CHECK(result.status == 0);
  const auto configs = configs_of(result, {{"worker", 2}});
  CHECK(configs.size() == 2);
}

TEST_CASE("--chief: the first of the N tasks is the chief, the others workers 0..N-2") {
  SUBCASE("-n 3 --chief --ps 1") {
    const auto result = run({"-n", "3", "--chief", "--ps", "1", "--", "sh", "-c", kPrintConfig});
    CHECK(result.status == 0);
    CHECK(result.err.empty());
    const auto configs = configs_of(result, {{"chief", 1}, {"worker", 2}, {"ps", 1}});
    REQUIRE(configs.size() == 4);
    const std::vector<std::tuple<std::string, std::string, int, std::string>> expected = {
        {"0", "chief", 0, "R=0 W=3"},
        {"1", "worker", 0, "R=1 W=3"},
        {"2", "worker", 1, "R=2 W=3"},
        {"ps 0", "ps", 0, "R=unset W=3"}};
    check_tasks(configs, expected);
    // The chief listens on the group's first port, as worker 0 does without --chief.
    CHECK(configs.at("0").first["cluster"]["chief"][0] !=
          configs.at("1").first["cluster"]["worker"][0]);
  }
  SUBCASE("-n 1 --chief: a chief alone, no empty worker job") {
    const auto result = run({"-n", "1", "--chief", "--", "sh", "-c", kPrintConfig});
    CHECK(result.status == 0);
    const auto configs = configs_of(result, {{"chief", 1}});
    REQUIRE(configs.count("0") == 1);
    CHECK(configs.at("0").first["task"]["type"] == "chief");
    CHECK(configs.at("0").second == "R=0 W=1");
  }
}

TEST_CASE("ps tasks that return once the workers have finished: success") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  // Like strata::ps::serve_if_ps(): a ps task serves until every worker has gone.
  const std::string script = "if [ -z \"$STRATA_LAUNCH_RANK\" ]; then " +
                             wait_until_peers(pids, 2) + "echo served; exit 0; fi; echo $$ >> '" +
                             pids + "'; sleep 0.2; echo trained";
  const auto result = run({"-n", "2", "--ps", "2", "--", "sh", "-c", script});
  CHECK(result.status == 0);
  CHECK(result.err.empty());
  CHECK(result.elapsed < 5s);
  const auto out = by_task(result.out);
  CHECK(out.at("0") == std::vector<std::string>{"trained"});
  CHECK(out.at("1") == std::vector<std::string>{"trained"});
  CHECK(out.at("ps 0") == std::vector<std::string>{"served"});
  CHECK(out.at("ps 1") == std::vector<std::string>{"served"});
}

TEST_CASE("a ps task still running --ps-grace after the group finished is stopped and named") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  // ps 0 returns when the workers are done; ps 1 never notices.
  const std::string ps_forever = "echo $$ >> '" + pids + "'; while :; do sleep 0.1; done";
  SUBCASE("it ends at SIGTERM") {
    const auto workers = dir.file("workers");
    std::ofstream(workers).close();
    const std::string script =
        "if [ -z \"$STRATA_LAUNCH_RANK\" ]; then case \"$TF_CONFIG\" in "
        "*'\"index\":1,\"type\":\"ps\"'*) " +
        ps_forever + ";; esac; " + wait_until_peers(workers, 2) + "exit 0; fi; echo $$ >> '" +
        workers + "'; echo trained";
    const auto result = run({"-n", "2", "--ps", "2", "--ps-grace", "1", "--", "sh", "-c", script});
    CHECK(result.status == 124);
    CHECK(result.elapsed >= 1s);
    CHECK(result.elapsed < 6s);
    CHECK(contains(
        result.err,
        "strata-launch: ps 1 still running 1 s after every worker exited 0, stopping it "));
    CHECK(contains(result.err, "strata-launch: ps 1 killed by signal 15 (SIGTERM)\n"));
    CHECK_FALSE(contains(result.err, "SIGKILL"));
    CHECK(contains(result.err, "strata-launch: summary: the failure started at ps 1\n"));
    CHECK(summary_line_of(result.err, "ps 1") ==
          "still running 1 s after every worker exited 0 (root cause); then killed by signal 15 "
          "(SIGTERM)");
    CHECK(summary_line_of(result.err, "ps 0").empty());  // it ended well
    CHECK(all_gone(read_lines(pids)));
  }
  SUBCASE("it ignores SIGTERM: SIGKILL after --grace; with --chief") {
    const std::string script = "if [ -z \"$STRATA_LAUNCH_RANK\" ]; then trap '' TERM; " +
                               ps_forever + "; fi; echo trained";
    const auto result = run({"-n", "2", "--chief", "--ps", "1", "--ps-grace=0.5", "--grace", "1",
                             "--", "sh", "-c", script});
    CHECK(result.status == 124);
    CHECK(result.elapsed >= 1500ms);
    CHECK(result.elapsed < 7s);
    CHECK(contains(result.err,
                   "strata-launch: ps 0 still running 0.5 s after the chief and every worker "
                   "exited 0, stopping it "));
    CHECK(contains(result.err, "strata-launch: sending SIGKILL to ps 0\n"));
    CHECK(contains(result.err, "strata-launch: summary: the failure started at ps 0\n"));
    CHECK(summary_line_of(result.err, "ps 0") ==
          "still running 0.5 s after the chief and every worker exited 0 (root cause); then "
          "killed by signal 9 (SIGKILL)");
    const auto out = by_task(result.out);
    CHECK(out.at("0") == std::vector<std::string>{"trained"});
    CHECK(out.at("1") == std::vector<std::string>{"trained"});
    CHECK(all_gone(read_lines(pids)));
  }
}

TEST_CASE("a failing ps task stops the workers and is the root cause") {
  TempDir dir;
  const auto pids = dir.file("pids");
  std::ofstream(pids).close();
  const std::string script = "if [ -z \"$STRATA_LAUNCH_RANK\" ]; then " + wait_for_lines(pids, 2) +
                             "echo 'cannot serve' >&2; exit 3; fi; sleep 60 & echo $! >> '" + pids +
                             "'; wait";
  const auto result = run({"-n", "2", "--ps", "1", "--", "sh", "-c", script});
  CHECK(result.status == 3);
  CHECK(result.elapsed < 5s);
  CHECK(by_task(result.err).at("ps 0") == std::vector<std::string>{"cannot serve"});
  CHECK(contains(result.err, "strata-launch: ps 0 exited with status 3\n"));
  CHECK(contains(result.err, "strata-launch: summary: the failure started at ps 0\n"));
  CHECK(summary_line_of(result.err, "ps 0") == "exited with status 3 (root cause)");
  CHECK(summary_line_of(result.err, "rank 0") == "killed by signal 15 (SIGTERM) by strata-launch");
  CHECK(all_gone(read_lines(pids)));
}

#else

TEST_CASE("strata-launch tests need the tools (STRATA_BUILD_TOOLS=ON)") {
  MESSAGE("STRATA_LAUNCH_PROGRAM is not defined: strata-launch is not built, nothing to test");
}

#endif
