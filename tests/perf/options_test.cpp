// Tests for benchmarks/perf/options.hpp (strata-perf's command line): nccl-tests' flags and
// defaults, the value forms, and a CommandLineError naming the flag for every bad value.
//
// The header lives with the benchmark, in strata_perf_core, which these tests link.
#include <perf/options.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

using strata::DataType;
using strata::ReduceOp;
using strata::communicator::Collective;
using namespace strata::perf;

Options parse(std::vector<std::string_view> args) {
  return parse_options(args);
}

// The message of the CommandLineError that parsing `args` throws ("" when it does not throw).
std::string error_of(std::vector<std::string_view> args) {
  try {
    parse(std::move(args));
  } catch (const CommandLineError& error) {
    return error.what();
  }
  return "";
}

TEST_CASE("defaults and nccl-tests' flags") {
  const Options defaults = parse({"all_reduce"});
  CHECK(defaults.collective == Collective::all_reduce);
  CHECK(defaults.min_bytes == 8);
  CHECK(defaults.max_bytes == std::size_t{256} << 20);
  CHECK_FALSE(defaults.lend_from);
  CHECK(defaults.step_factor == 2);
  CHECK(defaults.warmup_iters == 5);
  CHECK(defaults.iters == 20);
  CHECK(defaults.type == DataType::float32);
  CHECK(defaults.op == ReduceOp::sum);
  CHECK(defaults.check);
  CHECK(defaults.transport == Transport::local);
  CHECK_FALSE(defaults.ranks);
  CHECK(defaults.algorithm == Algorithm::automatic);
  CHECK(defaults.bind == Binding::core);
  CHECK(parse({"all_reduce", "--transport", "tcp", "--algo", "hd"}).algorithm ==
        Algorithm::halving_doubling);
  CHECK(parse({"all_reduce", "--transport", "tcp", "--algo", "halving_doubling"}).algorithm ==
        Algorithm::halving_doubling);

  const Options o =
      parse({"all_reduce", "-b",           "1K",       "-e",         "64M",         "-f",
             "4",          "-w",           "1",        "-n",         "3",           "-d",
             "bfloat16",   "-o",           "avg",      "-r",         "2",           "-c",
             "0",          "--transport",  "tcp",      "--ranks",    "4",           "--algo",
             "rd",         "--congestion", "cubic",    "--bind",     "none",        "--csv",
             "-",          "--json",       "out.json", "--progress", "--lend-from", "32M"});
  CHECK(o.collective == Collective::all_reduce);
  CHECK(o.min_bytes == 1024);
  CHECK(o.max_bytes == std::size_t{64} << 20);
  CHECK(o.step_factor == 4);
  CHECK(o.warmup_iters == 1);
  CHECK(o.iters == 3);
  CHECK(o.type == DataType::bfloat16);
  CHECK(o.op == ReduceOp::mean);
  CHECK(o.root == 2);
  CHECK_FALSE(o.check);
  CHECK(o.transport == Transport::tcp);
  CHECK(o.ranks == 4);
  CHECK(o.algorithm == Algorithm::recursive_doubling);
  CHECK(o.congestion == "cubic");
  CHECK(o.lend_from == std::size_t{32} << 20);
  CHECK(o.bind == Binding::none);
  CHECK(o.csv == "-");
  CHECK(o.json == "out.json");
  CHECK(o.progress);
}

TEST_CASE("values attached to short flags and after '=' in long ones") {
  const Options o =
      parse({"--minbytes=16", "-e4K", "--datatype=half", "--op=prod", "broadcast", "--iters=7",
             "--warmup_iters=0", "--stepfactor=8", "--root=1", "--check=1"});
  CHECK(o.collective == Collective::broadcast);
  CHECK(o.min_bytes == 16);
  CHECK(o.max_bytes == 4096);
  CHECK(o.type == DataType::float16);
  CHECK(o.op == ReduceOp::product);
  CHECK(o.iters == 7);
  CHECK(o.warmup_iters == 0);
  CHECK(o.step_factor == 8);
  CHECK(o.root == 1);
}

TEST_CASE("every type and op name") {
  const std::pair<std::string_view, DataType> types[] = {
      {"int8", DataType::int8},         {"uint8", DataType::uint8},
      {"int32", DataType::int32},       {"int64", DataType::int64},
      {"half", DataType::float16},      {"float16", DataType::float16},
      {"bfloat16", DataType::bfloat16}, {"float", DataType::float32},
      {"float32", DataType::float32},   {"double", DataType::float64},
      {"float64", DataType::float64}};
  for (const auto& [name, type] : types)
    CHECK(parse({"all_gather", "-d", name}).type == type);
  const std::pair<std::string_view, ReduceOp> ops[] = {
      {"sum", ReduceOp::sum},  {"prod", ReduceOp::product}, {"product", ReduceOp::product},
      {"min", ReduceOp::min},  {"max", ReduceOp::max},      {"avg", ReduceOp::mean},
      {"mean", ReduceOp::mean}};
  for (const auto& [name, op] : ops)
    CHECK(parse({"reduce", "-o", name}).op == op);
}

TEST_CASE("help needs no collective") {
  CHECK(parse({"--help"}).help);
  CHECK(parse({"-h"}).help);
  CHECK(usage().find("--transport") != std::string::npos);
}

TEST_CASE("bad command lines name what is wrong") {
  CHECK(error_of({}).find("name a collective") != std::string::npos);
  CHECK(error_of({"all_to_all"}).find("unknown collective 'all_to_all'") != std::string::npos);
  CHECK(error_of({"all_reduce", "broadcast"}).find("unexpected argument") != std::string::npos);
  CHECK(error_of({"all_reduce", "--bogus"}).find("unknown option '--bogus'") != std::string::npos);
  CHECK(error_of({"all_reduce", "-b"}).find("-b needs a value") != std::string::npos);
  CHECK(error_of({"all_reduce", "-b", "8X"}).find("wants a size") != std::string::npos);
  CHECK(error_of({"all_reduce", "-b", "1M", "-e", "1K"}).find("larger than") != std::string::npos);
  CHECK(error_of({"all_reduce", "-f", "1"}).find("--stepfactor") != std::string::npos);
  CHECK(error_of({"all_reduce", "-f", "1", "-b", "1K", "-e", "1K"}).empty());  // one size
  CHECK(error_of({"all_reduce", "-n", "0"}).find("outside [1,") != std::string::npos);
  CHECK(error_of({"all_reduce", "-n", "x"}).find("wants an integer") != std::string::npos);
  CHECK(error_of({"all_reduce", "-w", "-1"}).find("outside [0,") != std::string::npos);
  CHECK(error_of({"all_reduce", "-c", "2"}).find("outside [0, 1]") != std::string::npos);
  CHECK(error_of({"all_reduce", "-d", "uint64"}).find("unknown data type") != std::string::npos);
  CHECK(error_of({"all_reduce", "-o", "mulsum"}).find("unknown op") != std::string::npos);
  CHECK(error_of({"all_reduce", "--ranks", "0"}).find("outside [1,") != std::string::npos);
  CHECK(
      parse_options(std::vector<std::string_view>{"all_reduce", "--transport", "nccl"}).transport ==
      Transport::nccl);
  CHECK(error_of({"all_reduce", "--transport", "gloo"}).find("unknown transport") !=
        std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "nccl", "--algo", "ring"})
            .find("NCCL chooses its own algorithms") != std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "nccl", "--congestion", "bbr"})
            .find("use it with --transport tcp") != std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "nccl", "--compare"})
            .find("compares with raw NCCL by itself") != std::string::npos);
  CHECK(error_of({"all_reduce", "--algo", "tree"}).find("unknown algorithm") != std::string::npos);
  CHECK(error_of({"all_reduce", "--algo", "ring"}).find("is a tcp algorithm") != std::string::npos);
  CHECK(error_of({"all_reduce", "--algo", "hd"}).find("is a tcp algorithm") != std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "tcp", "--algo", "reduce_to_one"})
            .find("is a local algorithm") != std::string::npos);
  for (const char* collective : {"all_gather", "reduce_scatter", "broadcast", "reduce"}) {
    CAPTURE(collective);
    CHECK(error_of({collective, "--transport", "tcp", "--algo", "ring"})
              .find("--algo ring chooses an all-reduce algorithm; " + std::string(collective)) !=
          std::string::npos);
    CHECK(error_of({collective, "--algo", "reduce_to_one"}).find("leave --algo out") !=
          std::string::npos);
    CHECK(error_of({collective, "--algo", "auto"}).empty());
  }
  CHECK(error_of({"all_reduce", "--transport", "tcp", "--algo", "rd"}).empty());
  CHECK(error_of({"all_reduce", "--congestion", "bbr"}).find("--transport tcp") !=
        std::string::npos);
  CHECK(error_of({"all_reduce", "--lend-from", "0"}).find("--transport tcp") != std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "tcp", "--lend-from", "lots"})
            .find("--lend-from wants a size") != std::string::npos);
  CHECK(parse({"all_reduce", "--transport", "tcp", "--lend-from", "off"}).lend_from == SIZE_MAX);
  CHECK(parse({"all_reduce", "--transport", "tcp", "--lend-from", "0"}).lend_from == 0U);
  CHECK(error_of({"all_reduce", "--bind", "socket"}).find("unknown binding 'socket'") !=
        std::string::npos);
  CHECK(error_of({"all_reduce", "--csv", "-", "--json", "-"}).find("both") != std::string::npos);
  CHECK(error_of({"all_reduce", "--progress=1"}).find("takes no value") != std::string::npos);

  const Options o = parse({"broadcast", "-r", "3"});
  CHECK_NOTHROW(check_against_group(o, 4));
  CHECK_THROWS_WITH_AS(check_against_group(o, 3), "--root 3 is not a rank of a group of 3",
                       CommandLineError);
}

// bind.hpp: which CPU each rank gets (mpirun gets the same in a rankfile).
TEST_CASE("--bind core gives each rank a CPU of its own, or consecutive ranks one to share") {
  const std::vector<int> cpus = {2, 3, 5};
  CHECK(cpu_of_rank(Binding::core, 0, 3, cpus) == 2);
  CHECK(cpu_of_rank(Binding::core, 2, 3, cpus) == 5);
  CHECK(cpu_of_rank(Binding::core, 1, 2, cpus) == 3);
  // More ranks than CPUs: ⌈ranks/CPUs⌉ consecutive ranks to a CPU, in order.
  const std::vector<int> two = {0, 1};
  std::vector<int> four;
  for (int r = 0; r < 4; ++r)
    four.push_back(*cpu_of_rank(Binding::core, r, 4, two));
  CHECK(four == std::vector<int>{0, 0, 1, 1});
  std::vector<int> seven;
  for (int r = 0; r < 7; ++r)
    seven.push_back(*cpu_of_rank(Binding::core, r, 7, cpus));
  CHECK(seven == std::vector<int>{2, 2, 2, 3, 3, 3, 5});
  CHECK_FALSE(cpu_of_rank(Binding::core, 0, 2, {}));  // nothing known: unbound
  CHECK_FALSE(cpu_of_rank(Binding::none, 0, 2, cpus));
  CHECK_FALSE(cpu_of_rank(Binding::core, 3, 3, cpus));
}

TEST_CASE("a bound thread runs on its CPU and says so") {
  CHECK(describe_cpus({1}) == "CPU 1");
  CHECK(describe_cpus({0, 1, 2, 3}) == "CPUs 0-3");
  CHECK(describe_cpus({0, 1, 2, 5, 7, 8}) == "CPUs 0-2,5,7-8");
  const auto cpus = allowed_cpus();
  REQUIRE_FALSE(cpus.empty());
  CHECK(describe_affinity() == describe_cpus(cpus));
  std::string bound;
  std::thread thread([&] {
    if (bind_calling_thread(cpus.back())) bound = describe_affinity();
  });
  thread.join();
  CHECK(bound == fmt::format("CPU {}", cpus.back()));
}

TEST_CASE("a bound thread measures on the CPUs it is given, then is bound again") {
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2) return;  // nothing to widen to
  const std::string own = fmt::format("CPU {}", cpus.back());
  bool bound = false;
  bool forked = false;
  std::string inside, after, after_throw, unchanged;
  int child_cpus = -1;  // how many CPUs what the measurement forks may use
  bool threw = false;
  std::thread thread([&] {
    bound = bind_calling_thread(cpus.back());
    inside = on_cpus(cpus, [&] {
      int pipe_fds[2];
      if (::pipe(pipe_fds) != 0) return std::string("no pipe");
      const pid_t pid = ::fork();
      forked = pid >= 0;
      if (pid < 0) {
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
        return std::string("no fork");
      }
      if (pid == 0) {  // no allocation, no locks: this process has other threads
        cpu_set_t mask;
        CPU_ZERO(&mask);
        const int count = ::sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
        [[maybe_unused]] auto written = ::write(pipe_fds[1], &count, sizeof count);
        ::_exit(0);
      }
      ::close(pipe_fds[1]);
      if (::read(pipe_fds[0], &child_cpus, sizeof child_cpus) != sizeof child_cpus) child_cpus = -2;
      ::close(pipe_fds[0]);
      ::waitpid(pid, nullptr, 0);
      return describe_affinity();
    });
    after = describe_affinity();
    try {
      on_cpus(cpus, []() -> int { throw std::runtime_error("the measurement failed"); });
    } catch (const std::runtime_error&) {
      threw = true;
    }
    after_throw = describe_affinity();
    unchanged = on_cpus({}, [] { return describe_affinity(); });
  });
  thread.join();
  REQUIRE(bound);
  REQUIRE(forked);
  CHECK(inside == describe_cpus(cpus));
  CHECK(child_cpus == static_cast<int>(cpus.size()));
  CHECK(after == own);
  CHECK(threw);
  CHECK(after_throw == own);
  CHECK(unchanged == own);
}

}  // namespace
