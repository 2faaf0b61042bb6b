// tests/support/process.hpp — starting, signalling and reaping real processes in tests.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace strata::testing {

/// A child process whose stdout and stderr go to a file; killed (SIGKILL) and reaped on
/// destruction if still running, so a failing test leaves nothing behind.
class Process {
 public:
  /// Starts argv[0] (searched in PATH) with `environment` added to this process's environment.
  Process(const std::vector<std::string>& argv,
          const std::map<std::string, std::string>& environment, std::string output_path)
      : output_path_(std::move(output_path)) {
    std::vector<char*> args;
    for (const auto& arg : argv)
      args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      for (const auto& [name, value] : environment)
        ::setenv(name.c_str(), value.c_str(), 1);
      const int fd = ::open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      ::execvp(args[0], args.data());
      std::_Exit(127);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  Process(Process&& other) noexcept
      : pid_(std::exchange(other.pid_, -1)),
        status_(other.status_),
        output_path_(std::exchange(other.output_path_, std::string())) {}
  ~Process() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (!output_path_.empty()) ::unlink(output_path_.c_str());  // tests leave no files behind
  }

  pid_t pid() const noexcept { return pid_; }
  void signal(int sig) const noexcept { ::kill(pid_, sig); }

  /// The wait status once the process has ended, or nothing if it is still running at
  /// `timeout` (it is left running).
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        status_ = status;
        break;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return status_;
  }

  /// Exit code when it exited normally, -signal when a signal ended it, nothing if running.
  std::optional<int> exit_code() const noexcept {
    if (!status_) return std::nullopt;
    if (WIFEXITED(*status_)) return WEXITSTATUS(*status_);
    if (WIFSIGNALED(*status_)) return -WTERMSIG(*status_);
    return std::nullopt;
  }

  std::string output() const {
    std::ifstream file(output_path_);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string output_path_;
};

}  // namespace strata::testing
