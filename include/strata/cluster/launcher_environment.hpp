// strata/cluster/launcher_environment.hpp — what torchrun, OpenMPI's mpirun and SLURM's srun
// tell each process about its place in the job.
//
// Each launcher describes the job in its own variables. These functions read one launcher's
// variables, check them against each other and return the common picture: this process's
// rank, the world size, its rank on its host, and where strata's rendezvous store (see
// strata/cluster/store.hpp) is served — always by rank 0, at `master_addr:master_port`.
//
//   torchrun  rank, size, local rank: RANK, WORLD_SIZE, LOCAL_RANK
//             store host: MASTER_ADDR
//             store port: STRATA_STORE_PORT, else MASTER_PORT + 1 under torchrun's agent
//                         store, else MASTER_PORT
//   openmpi   rank, size, local rank: OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK
//             store host: MASTER_ADDR (passed with mpirun -x)
//             store port: STRATA_STORE_PORT, else MASTER_PORT, else 29500
//   slurm     rank, size, local rank: SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS),
//                                     SLURM_LOCALID
//             store host: MASTER_ADDR, else the first node of SLURM_STEP_NODELIST (or
//                         SLURM_JOB_NODELIST)
//             store port: STRATA_STORE_PORT, else MASTER_PORT, else
//                         15000 + SLURM_JOB_ID % 10000
//
// A variable set to the empty string counts as unset.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/environment.hpp>
#include <strata/cluster/slurm.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

/// One process's place in a job, as its launcher described it.
struct LauncherEnvironment {
  /// Which launcher's variables were read: "torchrun", "openmpi" or "slurm".
  std::string launcher;
  /// This process's rank in [0, world_size).
  int rank = 0;
  /// Number of processes in the job (>= 1).
  int world_size = 1;
  /// This process's rank among the processes on its host, in [0, world_size); used to pick
  /// a device.
  int local_rank = 0;
  /// Host (name or address) where rank 0 serves strata's rendezvous store.
  std::string master_addr;
  /// Port of strata's rendezvous store. Not always MASTER_PORT: see `torchrun_environment`.
  std::uint16_t master_port = 0;

  friend bool operator==(const LauncherEnvironment&, const LauncherEnvironment&) = default;
};

/// The port torchrun's default would give MASTER_PORT, which OpenMPI runs default to as well.
inline constexpr std::uint16_t kDefaultMasterPort = 29500;

/// SLURM runs without MASTER_PORT or STRATA_STORE_PORT take their store port from the job id,
/// as PyTorch Lightning's SLURMEnvironment does (15000 + the last four digits of
/// SLURM_JOB_ID), so that concurrent jobs sharing a node rarely collide and every task of a
/// job agrees without talking.
inline constexpr std::uint16_t kSlurmPortBase = 15000;
inline constexpr std::uint32_t kSlurmPortSpan = 10000;

/// Reads torchrun's (torch.distributed.run, also torch.distributed.launch --use-env)
/// variables.
///
/// Read: RANK, WORLD_SIZE, LOCAL_RANK (0 when unset), LOCAL_WORLD_SIZE (checked when set),
/// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, STRATA_STORE_PORT.
///
/// The store port: torchrun's elastic agent already serves its own TCPStore on MASTER_PORT
/// (it says so by setting TORCHELASTIC_USE_AGENT_STORE=True), so strata's store cannot bind
/// it. The port is therefore STRATA_STORE_PORT when set, else MASTER_PORT + 1 when
/// TORCHELASTIC_USE_AGENT_STORE is "True", else MASTER_PORT (a hand-made env:// setup, where
/// nothing else holds it).
///
/// Example: node 1 of `torchrun --nnodes=2 --nproc-per-node=4 --rdzv-endpoint=n0:29500`,
/// third process: RANK=6 WORLD_SIZE=8 LOCAL_RANK=2 MASTER_ADDR=n0 MASTER_PORT=29500
/// TORCHELASTIC_USE_AGENT_STORE=True → {"torchrun", 6, 8, 2, "n0", 29501}.
///
/// @returns std::nullopt when neither RANK nor WORLD_SIZE is set (not a torchrun process).
/// @throws ConfigurationError (rank -1, operation = the variable's name) when only one of
///   RANK / WORLD_SIZE is set, MASTER_ADDR or MASTER_PORT is missing, a value is not a
///   non-negative decimal number, WORLD_SIZE is 0, RANK >= WORLD_SIZE, LOCAL_RANK is not below
///   WORLD_SIZE (and LOCAL_WORLD_SIZE), or a port is not in 1..65535 (MASTER_PORT + 1 included).
inline std::optional<LauncherEnvironment> torchrun_environment(const Environment& env);

/// Reads OpenMPI's variables (processes started by `mpirun` / `mpiexec` of OpenMPI).
///
/// Read: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK (0 when
/// unset), OMPI_COMM_WORLD_LOCAL_SIZE (checked when set), MASTER_ADDR, MASTER_PORT,
/// STRATA_STORE_PORT.
///
/// mpirun says nothing about where rank 0 runs, so MASTER_ADDR must be exported to every
/// process: `mpirun -np 4 -x MASTER_ADDR=host0 -x MASTER_PORT=29500 ./train`. It may be left
/// out only for a single process (then 127.0.0.1). The port is STRATA_STORE_PORT, else
/// MASTER_PORT, else 29500.
///
/// Example: the second process of `mpirun -np 4 -x MASTER_ADDR=10.0.0.1 ./train` on one host:
/// OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1
/// MASTER_ADDR=10.0.0.1 → {"openmpi", 1, 4, 1, "10.0.0.1", 29500}.
///
/// @returns std::nullopt when neither OMPI_COMM_WORLD_RANK nor OMPI_COMM_WORLD_SIZE is set.
/// @throws ConfigurationError (rank -1, operation = the variable's name) for the same kinds
///   of bad values as `torchrun_environment`, and when MASTER_ADDR is missing for more than
///   one process (the message shows the `mpirun -x` flags that pass it).
inline std::optional<LauncherEnvironment> openmpi_environment(const Environment& env);

/// Reads SLURM's variables (tasks started by `srun`).
///
/// Read: SLURM_PROCID, SLURM_NTASKS (else SLURM_NPROCS), SLURM_LOCALID (0 when unset),
/// SLURM_NODEID, SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), SLURM_STEP_TASKS_PER_NODE
/// (else SLURM_TASKS_PER_NODE), SLURM_JOB_ID, MASTER_ADDR, MASTER_PORT, STRATA_STORE_PORT.
///
/// The store host is MASTER_ADDR when set, else the first node of the expanded node list
/// (srun starts task 0 there with the default block distribution). The port is
/// STRATA_STORE_PORT, else MASTER_PORT, else `kSlurmPortBase + SLURM_JOB_ID % kSlurmPortSpan`.
/// When a tasks-per-node list is present it must add up to the number of tasks, describe as
/// many nodes as the node list of the same scope (step or job), and hold this task's local id
/// on node SLURM_NODEID.
///
/// Example: the fourth task of `srun -N2 --ntasks-per-node=2 ./train` in job 4242:
/// SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_LOCALID=1 SLURM_NODEID=1 SLURM_STEP_NODELIST=node[1-2]
/// SLURM_STEP_TASKS_PER_NODE=2(x2) SLURM_JOB_ID=4242 → {"slurm", 3, 4, 1, "node1", 19242}.
///
/// @returns std::nullopt when SLURM_PROCID is not set (not a task started by srun).
/// @throws ConfigurationError (rank -1, operation = the variable's name) for the same kinds
///   of bad values as `torchrun_environment`, a malformed node or tasks-per-node list (see
///   `expand_hostlist`, `expand_tasks_per_node`), lists that disagree with SLURM_NTASKS, or
///   no way to find the store's host or port.
inline std::optional<LauncherEnvironment> slurm_environment(const Environment& env);

// ---- implementation ---------------------------------------------------------------------------

namespace detail::launcher {

/// The value of `name`, with "" treated as unset (a common result of `VAR= cmd`).
inline std::optional<std::string> lookup(const Environment& env, std::string_view name) {
  std::optional<std::string> value = env(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

[[noreturn]] inline void throw_bad_variable(std::string_view name, std::string_view value,
                                            std::string_view why, std::string_view what_to_do) {
  throw ConfigurationError(
      -1, name, fmt::format("cannot use {}: {}", slurm::quote_excerpt(value), why), what_to_do);
}

/// Parses a non-negative decimal number no larger than `max`; nothing else (no sign, no
/// spaces) is accepted, so that typos are reported rather than half-read.
inline std::uint64_t parse_unsigned(std::string_view name, std::string_view value,
                                    std::uint64_t max, std::string_view what_to_do) {
  if (!value.empty() && value.front() == '-')
    throw_bad_variable(name, value, "it is negative", what_to_do);
  std::uint64_t result = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
  if (ec == std::errc() && end == value.data() + value.size() && !value.empty() &&
      slurm::is_digit(value.front())) {
    if (result > max)
      throw_bad_variable(name, value, fmt::format("it is larger than {}", max), what_to_do);
    return result;
  }
  if (ec == std::errc::result_out_of_range)
    throw_bad_variable(name, value, fmt::format("it is larger than {}", max), what_to_do);
  throw_bad_variable(name, value, "it is not a non-negative decimal number", what_to_do);
}

inline int parse_int_variable(const Environment& env, std::string_view name,
                              std::string_view what_to_do) {
  const auto value = lookup(env, name);
  return static_cast<int>(parse_unsigned(
      name, *value, static_cast<std::uint64_t>(std::numeric_limits<int>::max()), what_to_do));
}

inline std::optional<int> parse_optional_int(const Environment& env, std::string_view name,
                                             std::string_view what_to_do) {
  if (!lookup(env, name)) return std::nullopt;
  return parse_int_variable(env, name, what_to_do);
}

inline std::optional<std::uint16_t> parse_optional_port(const Environment& env,
                                                        std::string_view name) {
  const auto value = lookup(env, name);
  if (!value) return std::nullopt;
  constexpr std::string_view kWhatToDo = "give a TCP port number between 1 and 65535";
  const std::uint64_t port = parse_unsigned(name, *value, 65535, kWhatToDo);
  if (port == 0) throw_bad_variable(name, *value, "port 0 cannot be agreed on", kWhatToDo);
  return static_cast<std::uint16_t>(port);
}

/// Checks the numbers every launcher provides, naming the variable that is wrong.
inline void check_layout(const LauncherEnvironment& result, std::string_view rank_name,
                         std::string_view size_name, std::string_view local_rank_name,
                         std::string_view what_to_do) {
  if (result.world_size < 1)
    throw_bad_variable(size_name, std::to_string(result.world_size),
                       "a job has at least one process", what_to_do);
  if (result.rank >= result.world_size)
    throw_bad_variable(rank_name, std::to_string(result.rank),
                       fmt::format("the rank must be below {}={} (ranks are 0..{})", size_name,
                                   result.world_size, result.world_size - 1),
                       what_to_do);
  if (result.local_rank >= result.world_size)
    throw_bad_variable(
        local_rank_name, std::to_string(result.local_rank),
        fmt::format("the local rank must be below {}={}", size_name, result.world_size),
        what_to_do);
}

/// Checks a launcher's optional "processes on this host" count against the local rank.
inline void check_local_size(const Environment& env, const LauncherEnvironment& result,
                             std::string_view local_size_name, std::string_view local_rank_name,
                             std::string_view size_name, std::string_view what_to_do) {
  const std::optional<int> local_size = parse_optional_int(env, local_size_name, what_to_do);
  if (!local_size) return;
  if (*local_size < 1 || *local_size > result.world_size)
    throw_bad_variable(local_size_name, std::to_string(*local_size),
                       fmt::format("it must be between 1 and {}={}", size_name, result.world_size),
                       what_to_do);
  if (result.local_rank >= *local_size)
    throw_bad_variable(
        local_rank_name, std::to_string(result.local_rank),
        fmt::format("the local rank must be below {}={}", local_size_name, *local_size),
        what_to_do);
}

[[noreturn]] inline void throw_missing(std::string_view name, std::string_view context,
                                       std::string_view what_to_do) {
  throw ConfigurationError(-1, name, fmt::format("{} is not set ({})", name, context), what_to_do);
}

/// The variable holding SLURM's number of tasks: SLURM_NTASKS, else SLURM_NPROCS.
inline std::string_view slurm_size_name(const Environment& env, std::string_view what_to_do) {
  if (lookup(env, "SLURM_NTASKS")) return "SLURM_NTASKS";
  if (!lookup(env, "SLURM_NPROCS"))  // older SLURM releases
    throw_missing("SLURM_NTASKS", "SLURM_PROCID is set; SLURM_NPROCS is not either", what_to_do);
  return "SLURM_NPROCS";
}

/// SLURM's node list, expanded. Step variables describe this srun; job variables the allocation
/// (used when srun did not set the step ones, as in old releases).
struct SlurmNodes {
  bool step = false;      ///< read from SLURM_STEP_NODELIST
  std::string_view name;  ///< the variable read
  std::optional<std::vector<std::string>> hosts;
};

inline SlurmNodes slurm_nodes(const Environment& env) {
  SlurmNodes nodes;
  nodes.step = lookup(env, "SLURM_STEP_NODELIST").has_value();
  nodes.name = nodes.step ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (const auto list = lookup(env, nodes.name)) nodes.hosts = expand_hostlist(*list, nodes.name);
  return nodes;
}

/// Checks SLURM's tasks-per-node list, when there is one, against the number of tasks, the node
/// list of the same scope and this task's local id on node SLURM_NODEID.
inline void check_slurm_tasks_per_node(const Environment& env, const LauncherEnvironment& result,
                                       std::string_view size_name, const SlurmNodes& nodes,
                                       std::string_view what_to_do) {
  const bool step_tasks = lookup(env, "SLURM_STEP_TASKS_PER_NODE").has_value();
  const std::string_view tasks_name =
      step_tasks ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  const auto counts = lookup(env, tasks_name);
  if (!counts) return;
  const std::vector<int> per_node = expand_tasks_per_node(*counts, tasks_name);
  const long long total = std::accumulate(per_node.begin(), per_node.end(), 0LL);
  if (total != result.world_size)
    throw_bad_variable(
        tasks_name, *counts,
        fmt::format("it adds up to {} tasks but {}={}", total, size_name, result.world_size),
        what_to_do);
  if (nodes.hosts && nodes.step == step_tasks && nodes.hosts->size() != per_node.size())
    throw_bad_variable(tasks_name, *counts,
                       fmt::format("it describes {} nodes but {} lists {}", per_node.size(),
                                   nodes.name, nodes.hosts->size()),
                       what_to_do);
  const auto node_id = parse_optional_int(env, "SLURM_NODEID", what_to_do);
  if (!node_id) return;
  if (static_cast<std::size_t>(*node_id) >= per_node.size())
    throw_bad_variable("SLURM_NODEID", std::to_string(*node_id),
                       fmt::format("{} describes only {} nodes", tasks_name, per_node.size()),
                       what_to_do);
  const int on_node = per_node[static_cast<std::size_t>(*node_id)];
  if (result.local_rank >= on_node)
    throw_bad_variable(
        "SLURM_LOCALID", std::to_string(result.local_rank),
        fmt::format("node {} runs {} tasks according to {}", *node_id, on_node, tasks_name),
        what_to_do);
}

/// The store's host under SLURM: MASTER_ADDR, else the first node, where srun starts task 0.
inline std::string slurm_master_addr(const Environment& env, const SlurmNodes& nodes) {
  if (const auto master_addr = lookup(env, "MASTER_ADDR")) return *master_addr;
  if (nodes.hosts) return nodes.hosts->front();
  throw ConfigurationError(-1, "SLURM_STEP_NODELIST",
                           "none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST and MASTER_ADDR is "
                           "set, so the host of task 0 is unknown",
                           "start the program with srun, or set MASTER_ADDR to the host of "
                           "task 0");
}

/// The store's port under SLURM: STRATA_STORE_PORT, else MASTER_PORT, else one derived from the
/// job id.
inline std::uint16_t slurm_master_port(const Environment& env) {
  const auto master_port = parse_optional_port(env, "MASTER_PORT");
  if (const auto store_port = parse_optional_port(env, "STRATA_STORE_PORT")) return *store_port;
  if (master_port) return *master_port;
  if (const auto job_id = lookup(env, "SLURM_JOB_ID")) {
    const std::uint64_t id =
        parse_unsigned("SLURM_JOB_ID", *job_id, std::numeric_limits<std::uint64_t>::max(),
                       "SLURM_JOB_ID is set by SLURM; set STRATA_STORE_PORT instead");
    return static_cast<std::uint16_t>(kSlurmPortBase + id % kSlurmPortSpan);
  }
  throw ConfigurationError(-1, "SLURM_JOB_ID",
                           "none of STRATA_STORE_PORT, MASTER_PORT and SLURM_JOB_ID is set, so "
                           "the port of strata's store is unknown",
                           "set STRATA_STORE_PORT to a free port, the same for every task");
}

}  // namespace detail::launcher

inline std::optional<LauncherEnvironment> torchrun_environment(const Environment& env) {
  constexpr std::string_view kWhatToDo =
      "start the program with torchrun, or set RANK (0..WORLD_SIZE-1), WORLD_SIZE, LOCAL_RANK, "
      "MASTER_ADDR and MASTER_PORT for every process";
  const bool has_rank = detail::launcher::lookup(env, "RANK").has_value();
  const bool has_size = detail::launcher::lookup(env, "WORLD_SIZE").has_value();
  if (!has_rank && !has_size) return std::nullopt;
  if (!has_rank) detail::launcher::throw_missing("RANK", "WORLD_SIZE is set", kWhatToDo);
  if (!has_size) detail::launcher::throw_missing("WORLD_SIZE", "RANK is set", kWhatToDo);

  LauncherEnvironment result;
  result.launcher = "torchrun";
  result.rank = detail::launcher::parse_int_variable(env, "RANK", kWhatToDo);
  result.world_size = detail::launcher::parse_int_variable(env, "WORLD_SIZE", kWhatToDo);
  result.local_rank =
      detail::launcher::parse_optional_int(env, "LOCAL_RANK", kWhatToDo).value_or(0);
  detail::launcher::check_layout(result, "RANK", "WORLD_SIZE", "LOCAL_RANK", kWhatToDo);
  detail::launcher::check_local_size(env, result, "LOCAL_WORLD_SIZE", "LOCAL_RANK", "WORLD_SIZE",
                                     kWhatToDo);

  const auto master_addr = detail::launcher::lookup(env, "MASTER_ADDR");
  if (!master_addr)
    detail::launcher::throw_missing("MASTER_ADDR", "RANK and WORLD_SIZE are set",
                                    "set MASTER_ADDR to the host of rank 0 (torchrun sets it from "
                                    "--rdzv-endpoint or --master-addr)");
  result.master_addr = *master_addr;

  const auto master_port = detail::launcher::parse_optional_port(env, "MASTER_PORT");
  if (const auto store_port = detail::launcher::parse_optional_port(env, "STRATA_STORE_PORT")) {
    result.master_port = *store_port;
    return result;
  }
  if (!master_port)
    detail::launcher::throw_missing(
        "MASTER_PORT", "RANK and WORLD_SIZE are set",
        "set MASTER_PORT (torchrun sets it), or STRATA_STORE_PORT to the port "
        "of strata's store");
  if (detail::launcher::lookup(env, "TORCHELASTIC_USE_AGENT_STORE") == "True") {
    // torchrun's agent serves its own TCPStore on MASTER_PORT: take the next port.
    if (*master_port == 65535)
      detail::launcher::throw_bad_variable(
          "MASTER_PORT", "65535",
          "torchrun's agent store holds it and strata's store would need the next port",
          "set STRATA_STORE_PORT to a free port for strata's store");
    result.master_port = static_cast<std::uint16_t>(*master_port + 1);
  } else {
    result.master_port = *master_port;
  }
  return result;
}

inline std::optional<LauncherEnvironment> openmpi_environment(const Environment& env) {
  constexpr std::string_view kWhatToDo =
      "start the program with OpenMPI's mpirun, which sets OMPI_COMM_WORLD_RANK, "
      "OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_RANK for every process";
  const bool has_rank = detail::launcher::lookup(env, "OMPI_COMM_WORLD_RANK").has_value();
  const bool has_size = detail::launcher::lookup(env, "OMPI_COMM_WORLD_SIZE").has_value();
  if (!has_rank && !has_size) return std::nullopt;
  if (!has_rank)
    detail::launcher::throw_missing("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE is set",
                                    kWhatToDo);
  if (!has_size)
    detail::launcher::throw_missing("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set",
                                    kWhatToDo);

  LauncherEnvironment result;
  result.launcher = "openmpi";
  result.rank = detail::launcher::parse_int_variable(env, "OMPI_COMM_WORLD_RANK", kWhatToDo);
  result.world_size = detail::launcher::parse_int_variable(env, "OMPI_COMM_WORLD_SIZE", kWhatToDo);
  result.local_rank =
      detail::launcher::parse_optional_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", kWhatToDo)
          .value_or(0);
  detail::launcher::check_layout(result, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK", kWhatToDo);
  detail::launcher::check_local_size(env, result, "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                                     kWhatToDo);

  if (const auto master_addr = detail::launcher::lookup(env, "MASTER_ADDR")) {
    result.master_addr = *master_addr;
  } else if (result.world_size == 1) {
    result.master_addr = "127.0.0.1";  // nobody needs to reach a single process's store
  } else {
    throw ConfigurationError(
        -1, "MASTER_ADDR",
        "MASTER_ADDR is not set (mpirun does not say where rank 0 runs, and strata's store "
        "is served there)",
        "pass the host of rank 0 to every process: mpirun -x MASTER_ADDR=host -x "
        "MASTER_PORT=port ...");
  }
  const auto master_port = detail::launcher::parse_optional_port(env, "MASTER_PORT");
  const auto store_port = detail::launcher::parse_optional_port(env, "STRATA_STORE_PORT");
  result.master_port = store_port.value_or(master_port.value_or(kDefaultMasterPort));
  return result;
}

inline std::optional<LauncherEnvironment> slurm_environment(const Environment& env) {
  constexpr std::string_view kWhatToDo =
      "start the program with srun, which sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID for "
      "every task";
  if (!detail::launcher::lookup(env, "SLURM_PROCID")) return std::nullopt;

  LauncherEnvironment result;
  result.launcher = "slurm";
  result.rank = detail::launcher::parse_int_variable(env, "SLURM_PROCID", kWhatToDo);
  const std::string_view size_name = detail::launcher::slurm_size_name(env, kWhatToDo);
  result.world_size = detail::launcher::parse_int_variable(env, size_name, kWhatToDo);
  result.local_rank =
      detail::launcher::parse_optional_int(env, "SLURM_LOCALID", kWhatToDo).value_or(0);
  detail::launcher::check_layout(result, "SLURM_PROCID", size_name, "SLURM_LOCALID", kWhatToDo);

  const detail::launcher::SlurmNodes nodes = detail::launcher::slurm_nodes(env);
  detail::launcher::check_slurm_tasks_per_node(env, result, size_name, nodes, kWhatToDo);
  result.master_addr = detail::launcher::slurm_master_addr(env, nodes);
  result.master_port = detail::launcher::slurm_master_port(env);
  return result;
}

}  // namespace strata::cluster
