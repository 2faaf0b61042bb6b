// benchmarks/perf/options.cpp — parsing strata-perf's command line (options.hpp).
#include <perf/options.hpp>

#include <charconv>
#include <cstdint>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace strata::perf {

namespace {

std::optional<Collective> collective_from(std::string_view name) {
  if (name == "all_reduce") return Collective::all_reduce;
  if (name == "all_gather") return Collective::all_gather;
  if (name == "reduce_scatter") return Collective::reduce_scatter;
  if (name == "broadcast") return Collective::broadcast;
  if (name == "reduce") return Collective::reduce;
  return std::nullopt;
}

std::optional<DataType> type_from(std::string_view name) {
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

std::optional<ReduceOp> op_from(std::string_view name) {
  if (name == "sum") return ReduceOp::sum;
  if (name == "prod" || name == "product") return ReduceOp::product;
  if (name == "min") return ReduceOp::min;
  if (name == "max") return ReduceOp::max;
  if (name == "avg" || name == "mean") return ReduceOp::mean;
  return std::nullopt;
}

std::optional<Algorithm> algorithm_from(std::string_view name) {
  if (name == "auto" || name == "automatic") return Algorithm::automatic;
  if (name == "scatter_gather") return Algorithm::scatter_gather;
  if (name == "reduce_to_one") return Algorithm::reduce_to_one;
  if (name == "ring") return Algorithm::ring;
  if (name == "rd" || name == "recursive_doubling") return Algorithm::recursive_doubling;
  if (name == "hd" || name == "halving_doubling") return Algorithm::halving_doubling;
  return std::nullopt;
}

[[noreturn]] void fail(std::string message) {
  throw CommandLineError(std::move(message));
}

long long integer(std::string_view flag, std::string_view text, long long low, long long high) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    fail(fmt::format("{} wants an integer, got '{}'", flag, text));
  if (value < low || value > high)
    fail(fmt::format("{} {} is outside [{}, {}]", flag, value, low, high));
  return value;
}

std::size_t size(std::string_view flag, std::string_view text) {
  const auto bytes = parse_size(text);
  if (!bytes) fail(fmt::format("{} wants a size such as 8, 64K, 256M or 1G, got '{}'", flag, text));
  return *bytes;
}

// One flag of the command line: its name, and its value attached ("--name=value", "-xVALUE")
// or, when asked for, the next argument.
class Flag {
 public:
  Flag(std::span<const std::string_view> args, std::size_t& i) : args_(args), i_(i) {
    const std::string_view arg = args[i];
    name_ = arg;
    if (arg.starts_with("--")) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        name_ = arg.substr(0, eq);
        attached_ = arg.substr(eq + 1);
      }
    } else if (arg.size() > 2) {
      name_ = arg.substr(0, 2);
      attached_ = arg.substr(2);
    }
  }

  std::string_view name() const noexcept { return name_; }
  bool is(std::string_view short_name, std::string_view long_name) const noexcept {
    return (!short_name.empty() && name_ == short_name) || name_ == long_name;
  }
  std::string_view value() {
    if (attached_) return *attached_;
    if (i_ + 1 >= args_.size()) fail(fmt::format("{} needs a value", name_));
    return args_[++i_];
  }
  void no_value() const {
    if (attached_) fail(fmt::format("{} takes no value", name_));
  }

 private:
  std::span<const std::string_view> args_;
  std::size_t& i_;
  std::string_view name_;
  std::optional<std::string_view> attached_;
};

void set_type(Options& options, std::string_view text) {
  const auto type = type_from(text);
  if (!type)
    fail(fmt::format(
        "unknown data type '{}': use int8, uint8, int32, int64, half, bfloat16, float or double",
        text));
  options.type = *type;
}

void set_op(Options& options, std::string_view text) {
  const auto op = op_from(text);
  if (!op) fail(fmt::format("unknown op '{}': use sum, prod, min, max or avg", text));
  options.op = *op;
}

// nccl-tests' flags: the sweep, the data and the check. False when `flag` is none of them.
bool parse_sweep_flag(Options& options, Flag& flag) {
  const std::string_view name = flag.name();
  if (flag.is("-b", "--minbytes")) {
    options.min_bytes = size(name, flag.value());
  } else if (flag.is("-e", "--maxbytes")) {
    options.max_bytes = size(name, flag.value());
  } else if (flag.is("-f", "--stepfactor")) {
    options.step_factor = static_cast<std::size_t>(integer(name, flag.value(), 1, 1 << 20));
  } else if (flag.is("-w", "--warmup_iters")) {
    options.warmup_iters = static_cast<int>(integer(name, flag.value(), 0, 1'000'000));
  } else if (flag.is("-n", "--iters")) {
    options.iters = static_cast<int>(integer(name, flag.value(), 1, 1'000'000));
  } else if (flag.is("-d", "--datatype")) {
    set_type(options, flag.value());
  } else if (flag.is("-o", "--op")) {
    set_op(options, flag.value());
  } else if (flag.is("-r", "--root")) {
    options.root = static_cast<int>(integer(name, flag.value(), 0, kMaxRanks - 1));
  } else if (flag.is("-c", "--check")) {
    options.check = integer(name, flag.value(), 0, 1) != 0;
  } else {
    return false;
  }
  return true;
}

void set_transport(Options& options, std::string_view text) {
  if (text == "local")
    options.transport = Transport::local;
  else if (text == "tcp")
    options.transport = Transport::tcp;
  else if (text == "nccl")
    options.transport = Transport::nccl;
  else if (text == "ps")
    options.transport = Transport::ps;
  else if (text == "shm")
    options.transport = Transport::shm;
  else
    fail(fmt::format("unknown transport '{}': use local, tcp, shm, nccl or ps", text));
}

void set_algorithm(Options& options, std::string_view text) {
  const auto algorithm = algorithm_from(text);
  if (!algorithm)
    fail(fmt::format(
        "unknown algorithm '{}': use auto, scatter_gather or reduce_to_one (local), auto, ring "
        "or rd (tcp)",
        text));
  options.algorithm = *algorithm;
}

void set_lend_from(Options& options, std::string_view flag, std::string_view text) {
  const auto bytes = text == "off" ? std::optional<std::size_t>(SIZE_MAX) : parse_size(text);
  if (!bytes)
    fail(fmt::format("{} wants a size such as 0, 64K or 32M, or off, got '{}'", flag, text));
  options.lend_from = *bytes;
}

void set_binding(Options& options, std::string_view text) {
  if (text == "core")
    options.bind = Binding::core;
  else if (text == "none")
    options.bind = Binding::none;
  else
    fail(fmt::format("unknown binding '{}': use core or none", text));
}

// What the command line said explicitly, where a default and a choice must be told apart.
struct Given {
  bool collective = false;
  bool push_pull = false;  ///< the operation named is push_pull
  bool transport = false;
  bool servers = false;
  bool ps_shared_memory = false;
};

// strata's own flags: where and how the ranks run. False when `flag` is none of them.
bool parse_group_flag(Options& options, Flag& flag, Given& given) {
  const std::string_view name = flag.name();
  if (flag.is("", "--transport")) {
    set_transport(options, flag.value());
    given.transport = true;
  } else if (flag.is("", "--ranks")) {
    options.ranks = static_cast<int>(integer(name, flag.value(), 1, kMaxRanks));
  } else if (flag.is("", "--ps")) {
    options.servers = static_cast<int>(integer(name, flag.value(), 1, kMaxServers));
    given.servers = true;
  } else if (flag.is("", "--ps-shm")) {
    options.ps_shared_memory = integer(name, flag.value(), 0, 1) != 0;
    given.ps_shared_memory = true;
  } else if (flag.is("", "--algo")) {
    set_algorithm(options, flag.value());
  } else if (flag.is("", "--congestion")) {
    options.congestion = std::string(flag.value());
  } else if (flag.is("", "--lend-from")) {
    set_lend_from(options, name, flag.value());
  } else if (flag.is("", "--shared-buffers")) {
    flag.no_value();
    options.shared_buffers = true;
  } else if (flag.is("", "--bind")) {
    set_binding(options, flag.value());
  } else {
    return false;
  }
  return true;
}

// What strata-perf writes and what else it runs. False when `flag` is none of them.
bool parse_output_flag(Options& options, Flag& flag) {
  const std::string_view name = flag.name();
  if (flag.is("-h", "--help")) {
    flag.no_value();
    options.help = true;
  } else if (flag.is("", "--csv")) {
    options.csv = std::string(flag.value());
  } else if (flag.is("", "--json")) {
    options.json = std::string(flag.value());
  } else if (flag.is("", "--progress")) {
    flag.no_value();
    options.progress = true;
  } else if (flag.is("", "--ceiling")) {
    flag.no_value();
    options.ceiling = true;
  } else if (flag.is("", "--compare")) {
    flag.no_value();
    options.compare = true;
  } else if (flag.is("", "--launches")) {
    options.launches = static_cast<int>(integer(name, flag.value(), 1, 1000));
  } else if (flag.is("", "--run-timeout")) {
    options.run_timeout_s = static_cast<int>(integer(name, flag.value(), 1, 7 * 24 * 3600));
  } else {
    return false;
  }
  return true;
}

void set_collective(Options& options, std::string_view arg, Given& given) {
  if (given.collective) fail(fmt::format("unexpected argument '{}'", arg));
  given.collective = true;
  if (arg == "push_pull") {
    given.push_pull = true;
    return;
  }
  const auto kind = collective_from(arg);
  if (!kind)
    fail(fmt::format(
        "unknown collective '{}': use all_reduce, all_gather, reduce_scatter, broadcast or "
        "reduce (or push_pull, with --transport ps)",
        arg));
  options.collective = *kind;
}

// push_pull and --transport ps go together: either one implies the other.
void resolve_operation(Options& options, const Given& given) {
  if (given.push_pull) {
    if (given.transport && options.transport != Transport::ps)
      fail(fmt::format("push_pull is the parameter servers' operation: use --transport ps, not {}",
                       to_string(options.transport)));
    options.transport = Transport::ps;
    return;
  }
  if (options.transport == Transport::ps) {
    if (given.collective)
      fail(fmt::format(
          "--transport ps measures push_pull (a push and a pull in one round trip to the "
          "parameter servers), not {}: name push_pull or no operation",
          to_string(options.collective)));
    return;
  }
  if (!given.collective)
    fail("name a collective: all_reduce, all_gather, reduce_scatter, broadcast or reduce");
}

bool is_local_algorithm(Algorithm algorithm) noexcept {
  return algorithm == Algorithm::scatter_gather || algorithm == Algorithm::reduce_to_one;
}

bool is_tcp_algorithm(Algorithm algorithm) noexcept {
  return algorithm == Algorithm::ring || algorithm == Algorithm::recursive_doubling ||
         algorithm == Algorithm::halving_doubling;
}

void check_sweep(const Options& options) {
  if (options.min_bytes > options.max_bytes)
    fail(fmt::format("--minbytes {} is larger than --maxbytes {}", options.min_bytes,
                     options.max_bytes));
  if (options.step_factor < 2 && options.min_bytes != options.max_bytes)
    fail("--stepfactor must be at least 2 when --minbytes and --maxbytes differ");
}

// --algo, --congestion and --lend-from against the collective and the transport.
void check_transport_settings(const Options& options) {
  const Algorithm algorithm = options.algorithm;
  if (algorithm != Algorithm::automatic && options.collective != Collective::all_reduce)
    fail(fmt::format(
        "--algo {} chooses an all-reduce algorithm; {} has one algorithm per transport: leave "
        "--algo out",
        to_string(algorithm), to_string(options.collective)));
  const bool local = options.transport == Transport::local;
  if (local && is_tcp_algorithm(algorithm) && !options.compare)
    fail(fmt::format(
        "--algo {} is a tcp algorithm: with --transport local use auto, scatter_gather or "
        "reduce_to_one",
        to_string(algorithm)));
  if (options.transport == Transport::tcp && is_local_algorithm(algorithm))
    fail(
        fmt::format("--algo {} is a local algorithm: with --transport tcp use auto, ring, rd or hd",
                    to_string(algorithm)));
  if (options.transport == Transport::shm && algorithm != Algorithm::automatic)
    fail(fmt::format("--algo {}: shared memory has one algorithm per collective; leave --algo out",
                     to_string(algorithm)));
  const bool nccl = options.transport == Transport::nccl;
  if (nccl && algorithm != Algorithm::automatic)
    fail(fmt::format("--algo {}: NCCL chooses its own algorithms; leave --algo out",
                     to_string(algorithm)));
  const bool ps = options.transport == Transport::ps;
  if (ps && algorithm != Algorithm::automatic)
    fail(fmt::format(
        "--algo {} chooses an all-reduce algorithm; push_pull has none: leave --algo out",
        to_string(algorithm)));
  if (options.congestion && (local || nccl || ps) && !options.compare)
    fail("--congestion sets strata's TCP connections: use it with --transport tcp");
  if (options.lend_from && (local || nccl || ps) && !options.compare)
    fail("--lend-from sets strata's TCP connections: use it with --transport tcp");
  if (options.shared_buffers && options.transport != Transport::shm && !options.compare)
    fail("--shared-buffers puts the buffers in shared memory: use it with --transport shm");
}

// --transport ps: what the parameter servers hold and how they update it.
void check_ps(const Options& options, const Given& given) {
  if (options.transport != Transport::ps) {
    if (given.servers) fail("--ps sets the parameter servers of --transport ps");
    if (given.ps_shared_memory) fail("--ps-shm sets the workers of --transport ps");
    return;
  }
  if (options.type != DataType::float32 && options.type != DataType::float64)
    fail(fmt::format(
        "-d {}: the parameter servers hold float and double values; use -d float or -d double",
        to_string(options.type)));
  if (options.op != ReduceOp::sum)
    fail(fmt::format(
        "-o {}: the parameter servers add every push to the values (UpdateRule::sum); leave -o "
        "out or say sum",
        nccl_op_name(options.op)));
}

void check_compare(const Options& options) {
  if (!options.compare) return;
  if (options.transport == Transport::nccl)
    fail(
        "--compare runs strata's CPU transports and their peers: --transport nccl compares "
        "with raw NCCL by itself");
  if (options.transport == Transport::ps)
    fail(
        "--compare runs strata's collectives and their peers: --transport ps measures its own "
        "peers (a plain TCP stream and ping-pong) in every run");
  if (options.collective != Collective::all_reduce)
    fail("--compare measures all_reduce only: the peers' other collectives are not wired");
  if (options.json) fail("--compare writes --csv only");
  if (is_local_algorithm(options.algorithm))
    fail(fmt::format(
        "--compare runs strata's tcp and local transports: --algo {} names a local algorithm, "
        "which --compare does not pass on",
        to_string(options.algorithm)));
}

void check_outputs(const Options& options) {
  if (options.csv == "-" && options.json == "-")
    fail("--csv and --json cannot both write to stdout");
  if (options.csv && options.csv->empty()) fail("--csv needs a file name or '-'");
  if (options.json && options.json->empty()) fail("--json needs a file name or '-'");
}

}  // namespace

Options parse_options(std::span<const std::string_view> args) {
  Options options;
  Given given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      set_collective(options, arg, given);
      continue;
    }
    Flag flag(args, i);
    if (!parse_sweep_flag(options, flag) && !parse_group_flag(options, flag, given) &&
        !parse_output_flag(options, flag))
      fail(fmt::format("unknown option '{}'", arg));
  }
  if (options.help) return options;

  resolve_operation(options, given);
  check_sweep(options);
  check_transport_settings(options);
  check_ps(options, given);
  check_compare(options);
  check_outputs(options);
  return options;
}

void check_against_group(const Options& options, int ranks) {
  if (options.root >= ranks)
    fail(fmt::format("--root {} is not a rank of a group of {}", options.root, ranks));
}

}  // namespace strata::perf
