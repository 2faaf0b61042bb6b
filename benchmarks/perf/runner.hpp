// benchmarks/perf/runner.hpp — what every rank runs: gathers where every rank is, measures the
// sweep of one collective (sweep.hpp, measured_rows.hpp) on a strata communicator, and reports
// on rank 0.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <perf/bind.hpp>
#include <perf/ceiling_report.hpp>
#include <perf/measured_rows.hpp>
#include <perf/options.hpp>
#include <perf/report.hpp>
#include <perf/run_info.hpp>
#include <perf/sweep.hpp>

#include <strata/communicator/options.hpp>
#include <strata/core/data_type.hpp>

namespace strata::perf {

/// How long the other ranks wait in the first collective while rank 0 measures --ceiling.
inline constexpr std::chrono::minutes kCeilingWait{10};

/// Bytes of one rank's record in gather_rank_info: "pid\thost\twhere", NUL-padded.
inline constexpr std::size_t kRankRecordBytes = 192;

/// This process's record: its process id, host name and `where`.
std::vector<std::uint8_t> own_rank_record(std::string_view where);

/// Every rank's entry, from the records of all of them, in rank order.
std::vector<RankInfo> parse_rank_records(std::span<const std::uint8_t> records, int ranks);

/// Every rank's entry of the "# Using devices" header: each rank contributes its own process id,
/// host name and `where`, gathered to all through the communicator.
template <class Comm>
std::vector<RankInfo> gather_rank_info(Comm& comm, std::string_view where,
                                       communicator::CallOptions call = {}) {
  const std::vector<std::uint8_t> mine = own_rank_record(where);
  std::vector<std::uint8_t> all(kRankRecordBytes * static_cast<std::size_t>(comm.size()));
  const std::span<const std::uint8_t> send(mine);
  const std::span<std::uint8_t> recv(all);
  if constexpr (requires { comm.all_gather(send, recv, call); })
    comm.all_gather(send, recv, call);
  else
    comm.all_gather(send, recv);  // a peer library's communicator keeps its own deadline
  return parse_rank_records(all, comm.size());
}

/// Everything one rank does: gathers the rank lines, runs the measured sweep of
/// `options.collective` for `options.type`, and reports on rank 0. Returns 0 when every value
/// was right, 1 otherwise (the same on every rank). `group_cpus`: the CPUs the group was given
/// before --bind placed its ranks, where rank 0 measures --ceiling (none: its own).
/// @throws strata::Error when a collective fails; CommandLineError for a root outside the group.
template <class Comm>
int run_rank(Comm& comm, const Options& options, std::string_view algorithm, std::string_view where,
             Reporter* reporter, const std::vector<int>& group_cpus = {}) {
  check_against_group(options, comm.size());
  // Measured before the group's first collective, while the other ranks wait in it: they wait
  // for as long as the measurement may take on a loaded machine, not the group's deadline.
  std::optional<Ceilings> ceilings;
  communicator::CallOptions first_call;
  if (options.ceiling) first_call.timeout = kCeilingWait;
  if (options.ceiling && comm.rank() == 0) ceilings = on_cpus(group_cpus, measure_ceilings);
  RunInfo info{options, comm.size(), std::string(algorithm),
               gather_rank_info(comm, where, first_call), ceilings};
  if (reporter != nullptr) reporter->begin(info);
  const Summary summary = visit_data_type(options.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto points = sweep_points(options, sizeof(T), comm.size());
    MeasuredRows<Comm, T> measured(comm, options, points,
                                   reporter != nullptr ? &reporter->progress() : nullptr);
    return run_sweep(points, std::ref(measured), reporter);
  });
  return summary.out_of_bounds == 0 ? 0 : 1;
}

}  // namespace strata::perf
