// benchmarks/perf/peers/peer_options.cpp — a peer's command line and help (peer_options.hpp).
#include <perf/peers/peer_options.hpp>

#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>

namespace strata::perf::peers {

namespace {

// What strata-perf runs but a peer cannot: the checks after parsing.
void check_peer_options(const Options& o) {
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
}

}  // namespace

PeerCommandLine parse_peer_command_line(std::span<const std::string_view> args) {
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

  check_peer_options(line.options);
  return line;
}

std::string peer_usage(std::string_view tool, std::string_view what, std::string_view launch,
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
