// benchmarks/perf/options.hpp — strata-perf's command line: the flags, their defaults, and the
// checks that need no group yet (those that need the group size are in `check_against_group`).
// The parser is options.cpp, the help text usage.cpp.
//
// Flags follow nccl-tests' names where they exist (-b -e -f -w -n -d -o -r -c, and their long
// forms), so that a command line moves between the two tools; strata's own are --transport,
// --ranks, --ps, --algo, --check, --csv, --json and --progress. Values go in the next argument
// ("-b 8"), attached to a short flag ("-b8") or after '=' in a long one ("--minbytes=8").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include <perf/bind.hpp>
#include <perf/nccl_format.hpp>

#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::perf {

/// A bad command line: strata-perf prints the message and exits with status 2.
class CommandLineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where the ranks run: threads of this process, processes that talk over TCP, threads of this
/// process on its GPUs, one each, through NCCL, or worker processes that push and pull through
/// parameter-server processes (ps/, over TCP).
enum class Transport : std::uint8_t { local, tcp, nccl, ps, shm };

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
  switch (transport) {
    case Transport::local:
      return "local";
    case Transport::tcp:
      return "tcp";
    case Transport::nccl:
      return "nccl";
    case Transport::ps:
      return "ps";
    case Transport::shm:
      return "shm";
  }
  return "?";
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
  /// Unset: 2, or the size of the cluster a launcher describes (TF_CONFIG, torchrun, ...). With
  /// --transport ps: the workers.
  std::optional<int> ranks{};
  /// --transport ps: the parameter servers (--ps), processes that strata-perf starts.
  int servers = 1;
  /// --transport ps: whether the workers move large values through shared memory with the
  /// servers of their host (--ps-shm; ps::ClientOptions::shared_memory).
  bool ps_shared_memory = true;
  Algorithm algorithm = Algorithm::automatic;
  /// tcp: TcpOptions::congestion_control; unset: strata's choice (reno within one host).
  std::optional<std::string> congestion{};
  /// tcp: TcpOptions::lend_from_bytes; unset: strata's default (never lend).
  std::optional<std::size_t> lend_from{};
  /// shm: the buffers come from the ranks' arenas (TcpCommunicator::allocate_shared), which the
  /// co-located processes read in place (--shared-buffers).
  bool shared_buffers = false;
  /// Where the ranks strata-perf starts itself run (bind.hpp): mpirun's default placement.
  Binding bind = Binding::core;
  /// A path, or "-" for stdout (the table then goes to stderr).
  std::optional<std::string> csv{};
  std::optional<std::string> json{};
  /// Progress on stderr even when stderr is not a terminal.
  bool progress = false;
  /// Measure this machine's limits in the same run (ceiling_report.hpp).
  bool ceiling = false;
  /// Run strata (tcp and local) and the installed peers side by side (compare/).
  bool compare = false;
  /// --compare: how many times each contender runs; the table shows medians.
  int launches = 1;
  /// --compare: the deadline of each contender's run, in seconds.
  int run_timeout_s = 1800;
  bool help = false;
};

/// The largest group strata-perf starts or joins (threads or processes).
inline constexpr int kMaxRanks = 4096;
/// The most parameter servers --transport ps starts.
inline constexpr int kMaxServers = 64;

/// What the run measures, as the outputs name it: the collective, or "push_pull" with
/// --transport ps (a parameter server's push and pull in one round trip).
constexpr std::string_view operation_name(const Options& options) noexcept {
  return options.transport == Transport::ps ? std::string_view("push_pull")
                                            : strata::to_string(options.collective);
}

/// The help text of `strata-perf --help`.
std::string usage();

/// Parses the arguments after the program name.
/// @throws CommandLineError naming the flag and the value at fault.
Options parse_options(std::span<const std::string_view> args);

/// Checks what depends on the group size, once it is known (from --ranks or a launcher).
/// @throws CommandLineError when the root is not a rank of the group.
void check_against_group(const Options& options, int ranks);

}  // namespace strata::perf
