// benchmarks/perf/strata_perf_modes.hpp — strata-perf's ways of running its ranks, one source
// each, so that the in-process and the TCP communicators compile in parallel.
#pragma once

#include <perf/options.hpp>

namespace strata::perf {

/// strata-perf's exit statuses beyond run_rank's 0 (right) and 1 (wrong values).
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailure = 3;
/// --ranks when neither the command line nor a launcher says.
inline constexpr int kDefaultRanks = 2;

/// --transport local: every rank a thread of this process (strata_perf_local.cpp).
int run_local(const Options& options);

/// --transport tcp: this process is one rank (of the group our supervisor started, or of the
/// cluster a launcher describes), or the supervisor of a group on 127.0.0.1 (strata_perf_tcp.cpp).
int run_tcp(const Options& options, char** argv);

/// --transport nccl: every rank a thread of this process on a GPU of its own, NcclCommunicator
/// against raw NCCL (strata_perf_nccl.cpp; a command-line error in builds without NCCL).
int run_nccl(const Options& options);

/// --transport ps: this process is a worker or a parameter server of the group our supervisor
/// started, or that supervisor, which starts the servers and workers on 127.0.0.1
/// (strata_perf_ps.cpp).
int run_ps(const Options& options, char** argv);

}  // namespace strata::perf
