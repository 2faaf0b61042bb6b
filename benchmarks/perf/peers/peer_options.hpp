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

#include <perf/options.hpp>

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
PeerCommandLine parse_peer_command_line(std::span<const std::string_view> args);

/// The help text of a peer: what it measures (`what`), how it starts (`launch`), its --algo
/// values (`algorithms`), and what differs from strata-perf, whose flags it takes.
std::string peer_usage(std::string_view tool, std::string_view what, std::string_view launch,
                       std::string_view algorithms);

}  // namespace strata::perf::peers
