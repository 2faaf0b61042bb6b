// benchmarks/perf/strata_perf_local.cpp — strata-perf's --transport local: one thread per rank
// on a LocalCommunicator, rank 0 on the calling thread.
#include <cerrno>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <perf/bind.hpp>
#include <perf/options.hpp>
#include <perf/report.hpp>
#include <perf/runner.hpp>

#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/algorithms/all_reduce_scatter_gather.hpp>
#include <strata/communicator/local.hpp>

#include "strata_perf_modes.hpp"

namespace strata::perf {
namespace {

// The outcome of each rank: its exit status, and what it threw.
struct RankOutcomes {
  std::vector<int> status;
  std::vector<std::string> errors;
};

// Every rank of a failed group raises; prints each distinct reason once. Returns the group's
// exit status: rank 0's, or kExitFailure when any rank threw.
int group_status(const RankOutcomes& outcomes) {
  std::set<std::string> printed;
  for (const auto& error : outcomes.errors)
    if (!error.empty() && printed.insert(error).second)
      fmt::print(stderr, "strata-perf: {}\n", error);
  if (!printed.empty()) return kExitFailure;
  return outcomes.status[0];
}

template <class AllReduceAlgorithm>
int run_local_group(const Options& options, std::string_view algorithm) {
  const int ranks = options.ranks.value_or(kDefaultRanks);
  check_against_group(options, ranks);
  Reporter reporter(options);
  auto group = communicator::LocalCommunicator<AllReduceAlgorithm>::create(ranks);
  RankOutcomes outcomes{std::vector<int>(static_cast<std::size_t>(ranks), 0),
                        std::vector<std::string>(static_cast<std::size_t>(ranks))};
  const std::vector<int> cpus = allowed_cpus();
  auto rank_main = [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    auto& comm = group[i];
    try {
      if (const auto cpu = cpu_of_rank(options.bind, r, ranks, cpus);
          cpu && !bind_calling_thread(*cpu))
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("binding rank {} to CPU {}", r, *cpu));
      outcomes.status[i] = run_rank(comm, options, algorithm,
                                    fmt::format("thread {:>3} (local), {}", r, describe_affinity()),
                                    r == 0 ? &reporter : nullptr, cpus);
    } catch (const std::exception& error) {
      comm.abort(error.what());  // the other ranks stop waiting for this one at once
      outcomes.errors[i] = error.what();
      outcomes.status[i] = kExitFailure;
    } catch (...) {
      comm.abort("unknown exception");
      outcomes.errors[i] = "unknown exception";
      outcomes.status[i] = kExitFailure;
    }
  };
  {
    std::vector<std::jthread> threads;
    for (int r = 1; r < ranks; ++r)
      threads.emplace_back(rank_main, r);
    rank_main(0);
  }
  return group_status(outcomes);
}

}  // namespace

int run_local(const Options& options) {
  switch (options.algorithm) {
    case Algorithm::reduce_to_one:
      return run_local_group<algorithms::AllReduceReduceToOne>(options, "reduce_to_one");
    default:
      return run_local_group<algorithms::AllReduceScatterGather>(options, "scatter_gather");
  }
}

}  // namespace strata::perf
