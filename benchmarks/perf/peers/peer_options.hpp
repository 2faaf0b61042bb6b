// benchmarks/perf/peers/peer_options.hpp — the command line of strata-perf's peers
// (strata-perf-gloo, strata-perf-mpi): strata-perf's flags (options.hpp), with `--algo` taken
// out first because its values are the peer's own, and the checks for what a peer cannot run.
//
// A peer measures all_reduce only, on int8, uint8, int32, int64, float and double (neither Gloo
// nor MPI has strata's half or bfloat16), with sum, prod, min, max, and avg computed as a sum
// followed by a division on every rank (neither library has a mean). It writes the table and
// --csv; --json is strata-perf's alone. --transport is accepted and ignored, so that the
// command line of a strata-perf run can be handed to a peer unchanged.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "../options.hpp"

#include <strata/core/data_type.hpp>

namespace strata::perf::peers {

/// Exit statuses, strata-perf's: 0 every value right, then these.
inline constexpr int kExitWrongValues = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailure = 3;

/// A peer's command line: strata-perf's options, and the value of --algo if one was given.
struct PeerCommandLine {
  Options options;
  std::optional<std::string> algorithm{};
};

/// Parses `args` (after the program name): every `--algo X` / `--algo=X` is removed (the last
/// one wins) and the rest goes to `parse_options`; then rejects what a peer cannot measure.
/// @throws CommandLineError naming the flag and the value at fault.
inline PeerCommandLine parse_peer_command_line(std::span<const std::string_view> args) {
  PeerCommandLine line;
  std::vector<std::string_view> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--algo") {
      if (i + 1 >= args.size()) throw CommandLineError("--algo needs a value");
      line.algorithm = std::string(args[++i]);
    } else if (arg.starts_with("--algo=")) {
      line.algorithm = std::string(arg.substr(7));
    } else {
      rest.push_back(arg);
    }
  }
  if (line.algorithm && line.algorithm->empty()) throw CommandLineError("--algo needs a value");
  line.options = parse_options(rest);
  if (line.options.help) return line;

  const Options& o = line.options;
  if (o.collective != Collective::all_reduce)
    throw CommandLineError(fmt::format("{} is not measured by strata-perf's peers: use all_reduce",
                                       to_string(o.collective)));
  if (o.type == DataType::float16 || o.type == DataType::bfloat16)
    throw CommandLineError(
        fmt::format("-d {}: neither Gloo nor MPI has this type here; use int8, uint8, int32, "
                    "int64, float or double",
                    to_string(o.type)));
  if (o.json) throw CommandLineError("--json is strata-perf's only; the peers write --csv");
  if (o.compare || o.ceiling)
    throw CommandLineError(
        fmt::format("{} is strata-perf's only", o.compare ? "--compare" : "--ceiling"));
  return line;
}

/// The help text of a peer: what it measures (`what`), how it starts (`launch`), its --algo
/// values (`algorithms`), and what differs from strata-perf, whose flags it takes.
inline std::string peer_usage(std::string_view tool, std::string_view what, std::string_view launch,
                              std::string_view algorithms) {
  return fmt::format(
      R"(usage: {0} all_reduce [strata-perf's options]

Measures {1} the way strata-perf measures strata (same sweep, timing,
data check, table and CSV), so that the numbers can be put next to strata's.
{2}

Takes strata-perf's flags (strata-perf --help), except:
  all_reduce only; -d int8 uint8 int32 int64 float double; -o sum prod min max avg (avg is a
  sum, then a division by the number of ranks on every rank, inside the timed call);
  --algo {3}
  --json, --compare and --ceiling are strata-perf's only; --transport is ignored.
  --bind places the ranks this program starts itself; under mpirun, mpirun's --bind-to does.

Exit status: 0 all values correct; 1 wrong values found; 2 bad command line; 3 failure.
)",
      tool, what, launch, algorithms);
}

}  // namespace strata::perf::peers
