// benchmarks/perf/compare/contenders.cpp — which programs --compare launches, and launching one
// (contenders.hpp).
#include <perf/compare/contenders.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <perf/compare/placement.hpp>

namespace strata::perf {

namespace {

// Where the peer programs are: next to this executable.
std::filesystem::path own_directory() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::current_path() : self.parent_path();
}

// `head`, then the shared arguments, then `tail`.
std::vector<std::string> command(std::vector<std::string> head,
                                 const std::vector<std::string>& shared,
                                 const std::vector<std::string>& tail) {
  head.insert(head.end(), shared.begin(), shared.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// strata-perf over TCP with the TCP settings of this command line, and in process.
std::vector<Contender> strata_contenders(const Options& options, const std::string& self,
                                         const std::vector<std::string>& shared) {
  std::vector<std::string> tcp_tail = {"--transport", "tcp"};
  if (options.algorithm != Algorithm::automatic) {
    tcp_tail.push_back("--algo");
    tcp_tail.emplace_back(to_string(options.algorithm));
  }
  if (options.congestion) {
    tcp_tail.push_back("--congestion");
    tcp_tail.push_back(*options.congestion);
  }
  if (options.lend_from) {
    tcp_tail.push_back("--lend-from");
    tcp_tail.push_back(*options.lend_from == SIZE_MAX ? std::string("off")
                                                      : std::to_string(*options.lend_from));
  }
  return {
      {"strata over TCP", command({self}, shared, tcp_tail), "strata tcp", false, true, true},
      {"strata over shared memory", command({self}, shared, {"--transport", "shm"}), "strata shm",
       false, true, false},
      {"strata over shared memory, buffers in its arenas",
       command({self}, shared, {"--transport", "shm", "--shared-buffers"}), "strata shm arena",
       false, true, false},
      {"strata in process", command({self}, shared, {"--transport", "local"}), "strata local",
       false, true, false},
  };
}

// Open MPI forced onto TCP, and with its defaults, both placed as --bind places the others.
std::vector<Contender> mpi_contenders(const Options& options, int ranks, const std::string& mpi,
                                      const std::string& mpiexec,
                                      const std::vector<std::string>& shared,
                                      const std::filesystem::path& scratch) {
  std::vector<std::string> launcher = {mpiexec, "-n", std::to_string(ranks), "--oversubscribe"};
  const auto placement = mpirun_placement(options.bind, ranks, scratch);
  launcher.insert(launcher.end(), placement.begin(), placement.end());
  if (::geteuid() == 0) launcher.emplace_back("--allow-run-as-root");
  auto tcp = launcher;
  for (const char* arg :
       {"--mca", "btl", "tcp,self", "--mca", "pml", "ob1", "--mca", "btl_tcp_if_include", "lo"})
    tcp.emplace_back(arg);
  tcp.push_back(mpi);
  auto shm = launcher;
  shm.push_back(mpi);
  return {
      {"OpenMPI over TCP", command(tcp, shared, {"--algo", "tcp"}), "mpi tcp", false, false, true},
      {"OpenMPI with its defaults (shared memory)", command(shm, shared, {"--algo", "default"}),
       "mpi default", false, false, false},
  };
}

}  // namespace

std::vector<std::string> shared_arguments(const Options& options, int ranks) {
  return {std::string(to_string(options.collective)),
          "-b",
          std::to_string(options.min_bytes),
          "-e",
          std::to_string(options.max_bytes),
          "-f",
          std::to_string(options.step_factor),
          "-w",
          std::to_string(options.warmup_iters),
          "-n",
          std::to_string(options.iters),
          "-d",
          std::string(to_string(options.type)),
          "-o",
          std::string(to_string(options.op)),
          "-c",
          options.check ? "1" : "0",
          "--ranks",
          std::to_string(ranks),
          "--bind",
          std::string(to_string(options.bind))};
}

std::string find_mpiexec(const std::string& configured) {
  if (!configured.empty() && std::filesystem::exists(configured)) return configured;
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe)
  std::istringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const auto candidate = std::filesystem::path(dir) / "mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

std::vector<Contender> contenders(const Options& options, int ranks, const std::string& mpiexec,
                                  std::vector<std::string>& skipped,
                                  const std::filesystem::path& scratch) {
  const auto dir = own_directory();
  const auto shared = shared_arguments(options, ranks);
  std::vector<Contender> list = strata_contenders(options, (dir / "strata-perf").string(), shared);
  if (options.type == DataType::float16 || options.type == DataType::bfloat16) {
    skipped.push_back(
        fmt::format("Gloo and OpenMPI: neither has {} here (strata alone is measured; "
                    "-d float or double compares)",
                    to_string(options.type)));
    return list;
  }
  const auto gloo = dir / "strata-perf-gloo";
  if (std::filesystem::exists(gloo))
    list.push_back(
        {"Gloo", command({gloo.string()}, shared, {"--algo", "all"}), "gloo", true, false, true});
  else
    skipped.push_back("Gloo: strata-perf-gloo was not built (install libgloo-dev and reconfigure)");
  const auto mpi = dir / "strata-perf-mpi";
  const std::string mpirun = find_mpiexec(mpiexec);
  if (std::filesystem::exists(mpi) && !mpirun.empty()) {
    for (auto& contender : mpi_contenders(options, ranks, mpi.string(), mpirun, shared, scratch))
      list.push_back(std::move(contender));
  } else {
    skipped.push_back(
        "OpenMPI: strata-perf-mpi or mpirun is missing (install libopenmpi-dev and openmpi-bin "
        "and reconfigure)");
  }
  return list;
}

std::vector<std::size_t> launch_order(std::size_t contenders, int launch) {
  std::vector<std::size_t> order(contenders);
  for (std::size_t i = 0; i < contenders; ++i)
    order[i] = (i + static_cast<std::size_t>(launch)) % contenders;
  return order;
}

int run_program(const std::vector<std::string>& argv,
                std::chrono::steady_clock::time_point deadline) {
  std::vector<char*> args;
  for (const auto& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::setpgid(0, 0);  // its own process group, so a kill reaches mpirun's ranks too
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 1);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    if (done < 0 && errno != EINTR)
      throw std::runtime_error(fmt::format("waitpid: {}", std::strerror(errno)));
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return 128 + SIGKILL;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace strata::perf
