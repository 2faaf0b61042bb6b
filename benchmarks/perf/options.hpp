// benchmarks/perf/options.hpp — strata-perf's command line: the flags, their defaults, and the
// checks that need no group yet (those that need the group size are in `check_against_group`).
//
// Flags follow nccl-tests' names where they exist (-b -e -f -w -n -d -o -r -c, and their long
// forms), so that a command line moves between the two tools; strata's own are --transport,
// --ranks, --algo, --check, --csv, --json and --progress. Values go in the next argument
// ("-b 8"), attached to a short flag ("-b8") or after '=' in a long one ("--minbytes=8").
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "bind.hpp"
#include "nccl_format.hpp"

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

/// A bad command line: strata-perf prints the message and exits with status 2.
class CommandLineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where the ranks run: threads of this process, or processes that talk over TCP.
enum class Transport : std::uint8_t { local, tcp };

/// The all-reduce algorithm, per transport: `automatic` is each transport's default
/// (local: scatter-gather; tcp: recursive doubling while small, ring above).
enum class Algorithm : std::uint8_t {
  automatic,
  scatter_gather,      ///< local: every rank reduces its 1/n of the buffer
  reduce_to_one,       ///< local: rank 0 reduces everything (TF's ReductionToOneDevice)
  ring,                ///< tcp: pipelined ring
  recursive_doubling,  ///< tcp: log2(n) rounds
  halving_doubling,    ///< tcp: recursive halving, then doubling (Rabenseifner)
};

constexpr std::string_view to_string(Transport transport) noexcept {
  return transport == Transport::local ? "local" : "tcp";
}

constexpr std::string_view to_string(Algorithm algorithm) noexcept {
  switch (algorithm) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::scatter_gather:
      return "scatter_gather";
    case Algorithm::reduce_to_one:
      return "reduce_to_one";
    case Algorithm::ring:
      return "ring";
    case Algorithm::recursive_doubling:
      return "recursive_doubling";
    case Algorithm::halving_doubling:
      return "halving_doubling";
  }
  return "invalid";
}

/// Everything the command line says. Defaults: a sweep of 8 B to 256 MiB in factors of 2,
/// 5 warm-up and 20 timed calls per size (nccl-tests' -w and -n), float sum, checked.
struct Options {
  Collective collective = Collective::all_reduce;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t step_factor = 2;
  int warmup_iters = 5;
  int iters = 20;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  bool check = true;
  Transport transport = Transport::local;
  /// Unset: 2, or the size of the cluster a launcher describes (TF_CONFIG, torchrun, ...).
  std::optional<int> ranks{};
  Algorithm algorithm = Algorithm::automatic;
  /// tcp: TcpOptions::congestion_control; unset: strata's choice (reno within one host).
  std::optional<std::string> congestion{};
  /// tcp: TcpOptions::lend_from_bytes; unset: strata's default (never lend).
  std::optional<std::size_t> lend_from{};
  /// Where the ranks strata-perf starts itself run (bind.hpp): mpirun's default placement.
  Binding bind = Binding::core;
  /// A path, or "-" for stdout (the table then goes to stderr).
  std::optional<std::string> csv{};
  std::optional<std::string> json{};
  /// Progress on stderr even when stderr is not a terminal.
  bool progress = false;
  /// Measure this machine's limits in the same run (ceiling_report.hpp).
  bool ceiling = false;
  /// Run strata (tcp and local) and the installed peers side by side (compare.hpp).
  bool compare = false;
  /// --compare: how many times each contender runs; the table shows medians.
  int launches = 1;
  /// --compare: the deadline of each contender's run, in seconds.
  int run_timeout_s = 1800;
  bool help = false;
};

/// The largest group strata-perf starts or joins (threads or processes).
inline constexpr int kMaxRanks = 4096;

inline std::string usage() {
  return R"(usage: strata-perf COLLECTIVE [options]

Measures a strata collective the way nccl-tests does: for every size of a sweep, the average
time of ITERS calls after WARMUP calls (the slowest rank's), out of place and in place, the
algorithm and bus bandwidth (GB = 1e9 bytes), and a data check. Rank 0 prints the table.

COLLECTIVE: all_reduce | all_gather | reduce_scatter | broadcast | reduce

  -b, --minbytes SIZE      smallest size (default 8); K, M, G suffixes are binary
  -e, --maxbytes SIZE      largest size (default 256M)
  -f, --stepfactor N       multiply the size by N between rows (default 2)
  -w, --warmup_iters N     untimed calls before each timing (default 5)
  -n, --iters N            timed calls per size and placement (default 20)
  -d, --datatype TYPE      int8 uint8 int32 int64 half|float16 bfloat16 float|float32
                           double|float64 (default float)
  -o, --op OP              sum prod|product min max avg|mean (default sum)
  -r, --root N             root of broadcast and reduce (default 0)
  -c, --check 0|1          check every result against an independent reference (default 1)
      --transport T        local: ranks are threads of this process (default)
                           tcp: ranks are processes on 127.0.0.1, started by strata-perf, or
                           this process is one rank of the cluster that TF_CONFIG, torchrun,
                           OpenMPI or SLURM describe (e.g. under strata-launch)
      --ranks N            number of ranks (default 2; under a launcher, its world size)
      --algo A             all-reduce algorithm. local: auto (scatter_gather),
                           scatter_gather, reduce_to_one. tcp: auto (recursive doubling up to
                           512 KiB / (ceil(log2 N) (N-1)), ring above), ring,
                           rd|recursive_doubling, hd|halving_doubling
      --congestion NAME    tcp: TCP congestion control of strata's connections, e.g. bbr or
                           cubic (default: reno within one host, the kernel's between hosts)
      --lend-from SIZE|off tcp: calls that send SIZE bytes or more lend their messages of 64K
                           and up instead of copying them (TcpOptions::lend_from_bytes; 0:
                           every call; default off)
      --bind core|none     core (default): each rank strata-perf starts runs on a CPU of
                           its own, or with more ranks than CPUs, consecutive ranks share one
                           (as mpirun --map-by ppr:K:core); none: wherever the scheduler puts
                           it. The header shows each rank's CPUs
      --csv FILE|-         also write the rows as CSV ('-': stdout, the table goes to stderr)
      --json FILE|-        also write the run and its rows as JSON
      --progress           progress line on stderr even when it is not a terminal
      --ceiling            first measure this machine's limits (full-duplex loopback TCP,
                           TCP round trip sleeping and polling, one core's memcpy and add),
                           on the CPUs the run was given, and print them in the header; a
                           2-rank tcp all_reduce's footer gives its largest size's share
      --compare            all_reduce only: run strata over tcp and local, then the installed
                           peers (Gloo's ring, ring_chunked, halving_doubling and bcube over
                           TCP; OpenMPI forced onto TCP and with its defaults) on the same
                           sweep, and print one table with strata's ratios (--csv: its rows)
      --launches K         --compare: run every contender K times, interleaved, each
                           launch starting with the next contender; medians (default 1)
      --run-timeout S      --compare: deadline of each contender's run (default 1800 s)
  -h, --help               this text

Every blocking call has a deadline: STRATA_TIMEOUT (e.g. 30s; default 60s).
Exit status: 0 all values correct; 1 wrong values found; 2 bad command line; 3 a collective or
the group failed (the message names the rank and the call).
)";
}

namespace detail::options {

inline std::optional<Collective> collective_from(std::string_view name) {
  if (name == "all_reduce") return Collective::all_reduce;
  if (name == "all_gather") return Collective::all_gather;
  if (name == "reduce_scatter") return Collective::reduce_scatter;
  if (name == "broadcast") return Collective::broadcast;
  if (name == "reduce") return Collective::reduce;
  return std::nullopt;
}

inline std::optional<DataType> type_from(std::string_view name) {
  if (name == "int8") return DataType::int8;
  if (name == "uint8") return DataType::uint8;
  if (name == "int32") return DataType::int32;
  if (name == "int64") return DataType::int64;
  if (name == "half" || name == "float16") return DataType::float16;
  if (name == "bfloat16") return DataType::bfloat16;
  if (name == "float" || name == "float32") return DataType::float32;
  if (name == "double" || name == "float64") return DataType::float64;
  return std::nullopt;
}

inline std::optional<ReduceOp> op_from(std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "prod" || name == "product") return ReduceOp::product;
  if (name == "min") return ReduceOp::min;
  if (name == "max") return ReduceOp::max;
  if (name == "avg" || name == "mean") return ReduceOp::mean;
  return std::nullopt;
}

inline std::optional<Algorithm> algorithm_from(std::string_view name) {
  if (name == "auto" || name == "automatic") return Algorithm::automatic;
  if (name == "scatter_gather") return Algorithm::scatter_gather;
  if (name == "reduce_to_one") return Algorithm::reduce_to_one;
  if (name == "ring") return Algorithm::ring;
  if (name == "rd" || name == "recursive_doubling") return Algorithm::recursive_doubling;
  if (name == "hd" || name == "halving_doubling") return Algorithm::halving_doubling;
  return std::nullopt;
}

[[noreturn]] inline void fail(std::string message) {
  throw CommandLineError(std::move(message));
}

inline long long integer(std::string_view flag, std::string_view text, long long low,
                         long long high) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    fail(fmt::format("{} wants an integer, got '{}'", flag, text));
  if (value < low || value > high)
    fail(fmt::format("{} {} is outside [{}, {}]", flag, value, low, high));
  return value;
}

inline std::size_t size(std::string_view flag, std::string_view text) {
  const auto bytes = parse_size(text);
  if (!bytes) fail(fmt::format("{} wants a size such as 8, 64K, 256M or 1G, got '{}'", flag, text));
  return *bytes;
}

}  // namespace detail::options

/// Parses the arguments after the program name.
/// @throws CommandLineError naming the flag and the value at fault.
inline Options parse_options(std::span<const std::string_view> args) {
  namespace d = detail::options;
  Options options;
  bool have_collective = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (have_collective) d::fail(fmt::format("unexpected argument '{}'", arg));
      const auto kind = d::collective_from(arg);
      if (!kind)
        d::fail(
            fmt::format("unknown collective '{}': use all_reduce, all_gather, "
                        "reduce_scatter, broadcast or reduce",
                        arg));
      options.collective = *kind;
      have_collective = true;
      continue;
    }
    // Split "--name=value" and "-xVALUE"; otherwise the value, if any, is the next argument.
    std::string_view name = arg;
    std::optional<std::string_view> attached;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        attached = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      attached = arg.substr(2);
    }
    auto is = [&](std::string_view short_name, std::string_view long_name) {
      return (!short_name.empty() && name == short_name) || name == long_name;
    };
    auto value = [&]() -> std::string_view {
      if (attached) return *attached;
      if (i + 1 >= args.size()) d::fail(fmt::format("{} needs a value", name));
      return args[++i];
    };
    auto no_value = [&] {
      if (attached) d::fail(fmt::format("{} takes no value", name));
    };

    if (is("-h", "--help")) {
      no_value();
      options.help = true;
    } else if (is("-b", "--minbytes")) {
      options.min_bytes = d::size(name, value());
    } else if (is("-e", "--maxbytes")) {
      options.max_bytes = d::size(name, value());
    } else if (is("-f", "--stepfactor")) {
      options.step_factor = static_cast<std::size_t>(d::integer(name, value(), 1, 1 << 20));
    } else if (is("-w", "--warmup_iters")) {
      options.warmup_iters = static_cast<int>(d::integer(name, value(), 0, 1'000'000));
    } else if (is("-n", "--iters")) {
      options.iters = static_cast<int>(d::integer(name, value(), 1, 1'000'000));
    } else if (is("-d", "--datatype")) {
      const std::string_view text = value();
      const auto type = d::type_from(text);
      if (!type)
        d::fail(
            fmt::format("unknown data type '{}': use int8, uint8, int32, int64, half, "
                        "bfloat16, float or double",
                        text));
      options.type = *type;
    } else if (is("-o", "--op")) {
      const std::string_view text = value();
      const auto op = d::op_from(text);
      if (!op) d::fail(fmt::format("unknown op '{}': use sum, prod, min, max or avg", text));
      options.op = *op;
    } else if (is("-r", "--root")) {
      options.root = static_cast<int>(d::integer(name, value(), 0, kMaxRanks - 1));
    } else if (is("-c", "--check")) {
      options.check = d::integer(name, value(), 0, 1) != 0;
    } else if (is("", "--transport")) {
      const std::string_view text = value();
      if (text == "local")
        options.transport = Transport::local;
      else if (text == "tcp")
        options.transport = Transport::tcp;
      else
        d::fail(fmt::format("unknown transport '{}': use local or tcp", text));
    } else if (is("", "--ranks")) {
      options.ranks = static_cast<int>(d::integer(name, value(), 1, kMaxRanks));
    } else if (is("", "--algo")) {
      const std::string_view text = value();
      const auto algorithm = d::algorithm_from(text);
      if (!algorithm)
        d::fail(
            fmt::format("unknown algorithm '{}': use auto, scatter_gather or reduce_to_one "
                        "(local), auto, ring or rd (tcp)",
                        text));
      options.algorithm = *algorithm;
    } else if (is("", "--congestion")) {
      options.congestion = std::string(value());
    } else if (is("", "--lend-from")) {
      const std::string_view text = value();
      const auto bytes = text == "off" ? std::optional<std::size_t>(SIZE_MAX) : parse_size(text);
      if (!bytes)
        d::fail(fmt::format("{} wants a size such as 0, 64K or 32M, or off, got '{}'", name, text));
      options.lend_from = *bytes;
    } else if (is("", "--bind")) {
      const std::string_view text = value();
      if (text == "core")
        options.bind = Binding::core;
      else if (text == "none")
        options.bind = Binding::none;
      else
        d::fail(fmt::format("unknown binding '{}': use core or none", text));
    } else if (is("", "--csv")) {
      options.csv = std::string(value());
    } else if (is("", "--json")) {
      options.json = std::string(value());
    } else if (is("", "--progress")) {
      no_value();
      options.progress = true;
    } else if (is("", "--ceiling")) {
      no_value();
      options.ceiling = true;
    } else if (is("", "--compare")) {
      no_value();
      options.compare = true;
    } else if (is("", "--launches")) {
      options.launches = static_cast<int>(d::integer(name, value(), 1, 1000));
    } else if (is("", "--run-timeout")) {
      options.run_timeout_s = static_cast<int>(d::integer(name, value(), 1, 7 * 24 * 3600));
    } else {
      d::fail(fmt::format("unknown option '{}'", arg));
    }
  }
  if (options.help) return options;

  if (!have_collective)
    d::fail("name a collective: all_reduce, all_gather, reduce_scatter, broadcast or reduce");
  if (options.min_bytes > options.max_bytes)
    d::fail(fmt::format("--minbytes {} is larger than --maxbytes {}", options.min_bytes,
                        options.max_bytes));
  if (options.step_factor < 2 && options.min_bytes != options.max_bytes)
    d::fail("--stepfactor must be at least 2 when --minbytes and --maxbytes differ");
  if (options.algorithm != Algorithm::automatic && options.collective != Collective::all_reduce)
    d::fail(
        fmt::format("--algo {} chooses an all-reduce algorithm; {} has one algorithm per "
                    "transport: leave --algo out",
                    to_string(options.algorithm), to_string(options.collective)));
  const bool local_algorithm = options.algorithm == Algorithm::scatter_gather ||
                               options.algorithm == Algorithm::reduce_to_one;
  const bool tcp_algorithm = options.algorithm == Algorithm::ring ||
                             options.algorithm == Algorithm::recursive_doubling ||
                             options.algorithm == Algorithm::halving_doubling;
  if (options.transport == Transport::local && tcp_algorithm && !options.compare)
    d::fail(
        fmt::format("--algo {} is a tcp algorithm: with --transport local use auto, "
                    "scatter_gather or reduce_to_one",
                    to_string(options.algorithm)));
  if (options.transport == Transport::tcp && local_algorithm)
    d::fail(
        fmt::format("--algo {} is a local algorithm: with --transport tcp use auto, ring, rd or hd",
                    to_string(options.algorithm)));
  if (options.congestion && options.transport == Transport::local && !options.compare)
    d::fail("--congestion sets strata's TCP connections: use it with --transport tcp");
  if (options.lend_from && options.transport == Transport::local && !options.compare)
    d::fail("--lend-from sets strata's TCP connections: use it with --transport tcp");
  if (options.compare) {
    if (options.collective != Collective::all_reduce)
      d::fail("--compare measures all_reduce only: the peers' other collectives are not wired");
    if (options.json) d::fail("--compare writes --csv only");
    if (local_algorithm)
      d::fail(
          fmt::format("--compare runs strata's tcp and local transports: --algo {} names a "
                      "local algorithm, which --compare does not pass on",
                      to_string(options.algorithm)));
  }
  if (options.csv == "-" && options.json == "-")
    d::fail("--csv and --json cannot both write to stdout");
  if (options.csv && options.csv->empty()) d::fail("--csv needs a file name or '-'");
  if (options.json && options.json->empty()) d::fail("--json needs a file name or '-'");
  return options;
}

/// Checks what depends on the group size, once it is known (from --ranks or a launcher).
/// @throws CommandLineError when the root is not a rank of the group.
inline void check_against_group(const Options& options, int ranks) {
  if (options.root >= ranks)
    detail::options::fail(
        fmt::format("--root {} is not a rank of a group of {}", options.root, ranks));
}

}  // namespace strata::perf
