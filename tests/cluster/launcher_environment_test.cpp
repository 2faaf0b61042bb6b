// Tests for strata/cluster/launcher_environment.hpp and environment.hpp: torchrun, OpenMPI and
// SLURM variables → LauncherEnvironment, absence → nullopt, bad values → ConfigurationError.
#include <strata/cluster/environment.hpp>
#include <strata/cluster/launcher_environment.hpp>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <doctest/doctest.h>

namespace {

using strata::cluster::environment_from;
using strata::cluster::LauncherEnvironment;
using strata::cluster::openmpi_environment;
using strata::cluster::slurm_environment;
using strata::cluster::torchrun_environment;
using Vars = std::map<std::string, std::string>;

LauncherEnvironment expected(std::string launcher, int rank, int world_size, int local_rank,
                             std::string master_addr, std::uint16_t master_port) {
  LauncherEnvironment e;
  e.launcher = std::move(launcher);
  e.rank = rank;
  e.world_size = world_size;
  e.local_rank = local_rank;
  e.master_addr = std::move(master_addr);
  e.master_port = master_port;
  return e;
}

// Checks that `resolve(vars)` throws ConfigurationError with operation `variable` and a message
// containing each of `parts`.
template <class Resolve>
void check_rejected(Resolve resolve, const Vars& vars, std::string_view variable,
                    std::initializer_list<std::string_view> parts) {
  std::string listed;
  for (const auto& [name, value] : vars)
    listed += name + "=" + value + " ";
  CAPTURE(listed);
  bool thrown = false;
  try {
    resolve(environment_from(vars));
  } catch (const strata::ConfigurationError& e) {
    thrown = true;
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.rank() == -1);
    CHECK(e.operation() == variable);
    CHECK(message.starts_with("strata: " + std::string(variable) + ": "));
    CHECK(message.find("; ") != std::string::npos);  // says what to do
    for (std::string_view part : parts)
      CHECK(message.find(part) != std::string::npos);
  }
  CHECK(thrown);
}

// `base` with `changes` applied; an empty value removes the variable.
Vars with(Vars base, const Vars& changes) {
  for (const auto& [name, value] : changes) {
    if (value.empty()) {
      base.erase(name);
    } else {
      base[name] = value;
    }
  }
  return base;
}

TEST_CASE("environment_from and process_environment") {
  const auto env = environment_from({{"A", "1"}, {"EMPTY", ""}});
  CHECK(env("A") == std::optional<std::string>("1"));
  CHECK(env("EMPTY") == std::optional<std::string>(""));
  CHECK_FALSE(env("B").has_value());

  ::setenv("STRATA_TEST_ENVIRONMENT_VARIABLE", "value", 1);
  const auto process = strata::cluster::process_environment();
  CHECK(process("STRATA_TEST_ENVIRONMENT_VARIABLE") == std::optional<std::string>("value"));
  ::unsetenv("STRATA_TEST_ENVIRONMENT_VARIABLE");
  CHECK_FALSE(process("STRATA_TEST_ENVIRONMENT_VARIABLE").has_value());  // read on every call
}

// ---- torchrun
// ------------------------------------------------------------------------------------

// What torchrun --nnodes=2 --nproc-per-node=4 --rdzv-endpoint=node0:29500 gives the third
// process of the second node (torch.distributed.elastic sets these, among others).
const Vars kTorchrun = {
    {"RANK", "6"},
    {"WORLD_SIZE", "8"},
    {"LOCAL_RANK", "2"},
    {"LOCAL_WORLD_SIZE", "4"},
    {"GROUP_RANK", "1"},
    {"ROLE_RANK", "6"},
    {"MASTER_ADDR", "node0"},
    {"MASTER_PORT", "29500"},
    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
    {"TORCHELASTIC_RUN_ID", "none"},
};

TEST_CASE("torchrun: a 2-node x 4-process job") {
  CHECK(torchrun_environment(environment_from(kTorchrun)) ==
        expected("torchrun", 6, 8, 2, "node0", 29501));  // next to the agent's own store
  // Every rank of the job agrees on the store's address.
  for (int rank = 0; rank < 8; ++rank) {
    const auto env = torchrun_environment(
        environment_from(with(kTorchrun, {{"RANK", std::to_string(rank)},
                                          {"LOCAL_RANK", std::to_string(rank % 4)},
                                          {"GROUP_RANK", std::to_string(rank / 4)}})));
    REQUIRE(env.has_value());
    CHECK(env->rank == rank);
    CHECK(env->local_rank == rank % 4);
    CHECK(env->master_addr == "node0");
    CHECK(env->master_port == 29501);
  }
}

TEST_CASE("torchrun: the store port") {
  // A hand-made env:// setup: nothing else holds MASTER_PORT.
  CHECK(torchrun_environment(
            environment_from(with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", ""}})))
            ->master_port == 29500);
  CHECK(torchrun_environment(
            environment_from(with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}})))
            ->master_port == 29500);
  // STRATA_STORE_PORT wins over both.
  CHECK(torchrun_environment(environment_from(with(kTorchrun, {{"STRATA_STORE_PORT", "40000"}})))
            ->master_port == 40000);
  // ...and makes MASTER_PORT unnecessary.
  CHECK(torchrun_environment(environment_from(with(
                                 kTorchrun, {{"STRATA_STORE_PORT", "40000"}, {"MASTER_PORT", ""}})))
            ->master_port == 40000);
}

TEST_CASE("torchrun: a minimal single-process environment; LOCAL_RANK defaults to 0") {
  const Vars vars = {
      {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}};
  CHECK(torchrun_environment(environment_from(vars)) ==
        expected("torchrun", 0, 1, 0, "127.0.0.1", 1234));
}

TEST_CASE("torchrun: absent variables give nullopt") {
  CHECK_FALSE(torchrun_environment(environment_from({})).has_value());
  CHECK_FALSE(torchrun_environment(
                  environment_from(
                      {{"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}, {"LOCAL_RANK", "0"}}))
                  .has_value());
  // Set but empty counts as unset.
  CHECK_FALSE(
      torchrun_environment(environment_from({{"RANK", ""}, {"WORLD_SIZE", ""}})).has_value());
  // Another launcher's variables are not torchrun's.
  CHECK_FALSE(
      torchrun_environment(environment_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"SLURM_PROCID", "0"}}))
          .has_value());
}

TEST_CASE("torchrun: bad values are ConfigurationErrors naming the variable") {
  const auto resolve = [](const auto& env) { return torchrun_environment(env); };
  check_rejected(resolve, with(kTorchrun, {{"RANK", ""}}), "RANK",
                 {"RANK is not set (WORLD_SIZE is set)", "start the program with torchrun"});
  check_rejected(resolve, with(kTorchrun, {{"WORLD_SIZE", ""}}), "WORLD_SIZE",
                 {"WORLD_SIZE is not set (RANK is set)"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "two"}}), "RANK",
                 {"cannot use 'two': it is not a non-negative decimal number"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "-1"}}), "RANK",
                 {"cannot use '-1': it is negative"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "+1"}}), "RANK", {"'+1'", "not a"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", " 1"}}), "RANK", {"' 1'", "not a"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "1.0"}}), "RANK", {"'1.0'", "not a"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "99999999999999999999999"}}), "RANK",
                 {"it is larger than 2147483647"});
  check_rejected(resolve, with(kTorchrun, {{"RANK", "8"}}), "RANK",
                 {"cannot use '8': the rank must be below WORLD_SIZE=8 (ranks are 0..7)"});
  check_rejected(resolve, with(kTorchrun, {{"WORLD_SIZE", "0"}}), "WORLD_SIZE",
                 {"cannot use '0': a job has at least one process"});
  check_rejected(resolve, with(kTorchrun, {{"WORLD_SIZE", "x"}}), "WORLD_SIZE", {"'x'"});
  check_rejected(resolve, with(kTorchrun, {{"LOCAL_RANK", "-2"}}), "LOCAL_RANK",
                 {"it is negative"});
  check_rejected(resolve, with(kTorchrun, {{"LOCAL_RANK", "4"}}), "LOCAL_RANK",
                 {"the local rank must be below LOCAL_WORLD_SIZE=4"});
  check_rejected(resolve, with(kTorchrun, {{"LOCAL_RANK", "8"}, {"LOCAL_WORLD_SIZE", ""}}),
                 "LOCAL_RANK", {"the local rank must be below WORLD_SIZE=8"});
  check_rejected(resolve, with(kTorchrun, {{"LOCAL_WORLD_SIZE", "9"}}), "LOCAL_WORLD_SIZE",
                 {"it must be between 1 and WORLD_SIZE=8"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_ADDR", ""}}), "MASTER_ADDR",
                 {"MASTER_ADDR is not set", "set MASTER_ADDR to the host of rank 0"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_PORT", ""}}), "MASTER_PORT",
                 {"MASTER_PORT is not set", "STRATA_STORE_PORT"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_PORT", "http"}}), "MASTER_PORT",
                 {"cannot use 'http'", "give a TCP port number between 1 and 65535"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_PORT", "65536"}}), "MASTER_PORT",
                 {"it is larger than 65535"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_PORT", "0"}}), "MASTER_PORT",
                 {"port 0 cannot be agreed on"});
  check_rejected(resolve, with(kTorchrun, {{"MASTER_PORT", "65535"}}), "MASTER_PORT",
                 {"torchrun's agent store holds it", "set STRATA_STORE_PORT"});
  check_rejected(resolve, with(kTorchrun, {{"STRATA_STORE_PORT", "-5"}}), "STRATA_STORE_PORT",
                 {"it is negative"});
  check_rejected(resolve, with(kTorchrun, {{"STRATA_STORE_PORT", "70000"}}), "STRATA_STORE_PORT",
                 {"it is larger than 65535"});
}

// ---- OpenMPI
// -------------------------------------------------------------------------------------

// What `mpirun -np 4 -x MASTER_ADDR=10.0.0.1 ./train` gives the second process on one host.
const Vars kOpenmpi = {
    {"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "4"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
    {"OMPI_COMM_WORLD_NODE_RANK", "0"},  {"OMPI_UNIVERSE_SIZE", "4"},
    {"MASTER_ADDR", "10.0.0.1"},
};

TEST_CASE("openmpi: mpirun -np 4 -x MASTER_ADDR") {
  CHECK(openmpi_environment(environment_from(kOpenmpi)) ==
        expected("openmpi", 1, 4, 1, "10.0.0.1", 29500));  // the default port
  CHECK(openmpi_environment(environment_from(with(kOpenmpi, {{"MASTER_PORT", "23456"}})))
            ->master_port == 23456);
  CHECK(openmpi_environment(environment_from(with(kOpenmpi, {{"MASTER_PORT", "23456"},
                                                             {"STRATA_STORE_PORT", "34567"}})))
            ->master_port == 34567);
  // Two hosts with two processes each: the fourth process.
  CHECK(openmpi_environment(
            environment_from(with(kOpenmpi, {{"OMPI_COMM_WORLD_RANK", "3"},
                                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}))) ==
        expected("openmpi", 3, 4, 1, "10.0.0.1", 29500));
  // A single process needs no MASTER_ADDR; the local rank defaults to 0.
  CHECK(openmpi_environment(
            environment_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}})) ==
        expected("openmpi", 0, 1, 0, "127.0.0.1", 29500));
}

TEST_CASE("openmpi: absent variables give nullopt") {
  CHECK_FALSE(openmpi_environment(environment_from({})).has_value());
  CHECK_FALSE(openmpi_environment(environment_from({{"MASTER_ADDR", "10.0.0.1"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}))
                  .has_value());
  CHECK_FALSE(openmpi_environment(environment_from(kTorchrun)).has_value());
}

TEST_CASE("openmpi: bad values are ConfigurationErrors naming the variable") {
  const auto resolve = [](const auto& env) { return openmpi_environment(env); };
  check_rejected(resolve, with(kOpenmpi, {{"MASTER_ADDR", ""}}), "MASTER_ADDR",
                 {"MASTER_ADDR is not set (mpirun does not say where rank 0 runs",
                  "mpirun -x MASTER_ADDR=host -x MASTER_PORT=port"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_SIZE", ""}}), "OMPI_COMM_WORLD_SIZE",
                 {"OMPI_COMM_WORLD_SIZE is not set"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_RANK", ""}}), "OMPI_COMM_WORLD_RANK",
                 {"OMPI_COMM_WORLD_RANK is not set"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_RANK", "4"}}), "OMPI_COMM_WORLD_RANK",
                 {"the rank must be below OMPI_COMM_WORLD_SIZE=4"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_RANK", "abc"}}), "OMPI_COMM_WORLD_RANK",
                 {"not a non-negative decimal number"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_SIZE", "-4"}}), "OMPI_COMM_WORLD_SIZE",
                 {"it is negative"});
  check_rejected(
      resolve,
      with(kOpenmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
      "OMPI_COMM_WORLD_LOCAL_RANK", {"the local rank must be below OMPI_COMM_WORLD_LOCAL_SIZE=2"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}}),
                 "OMPI_COMM_WORLD_LOCAL_RANK",
                 {"the local rank must be below OMPI_COMM_WORLD_SIZE=4"});
  check_rejected(resolve, with(kOpenmpi, {{"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}}),
                 "OMPI_COMM_WORLD_LOCAL_SIZE", {"it must be between 1 and OMPI_COMM_WORLD_SIZE=4"});
  check_rejected(resolve, with(kOpenmpi, {{"MASTER_PORT", "99999"}}), "MASTER_PORT",
                 {"it is larger than 65535"});
  check_rejected(resolve, with(kOpenmpi, {{"STRATA_STORE_PORT", "port"}}), "STRATA_STORE_PORT",
                 {"'port'"});
}

// ---- SLURM
// ---------------------------------------------------------------------------------------

// What `srun -N2 --ntasks-per-node=2 ./train` in job 4242 gives the fourth task.
const Vars kSlurm = {
    {"SLURM_PROCID", "3"},
    {"SLURM_NTASKS", "4"},
    {"SLURM_NPROCS", "4"},
    {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"},
    {"SLURM_STEP_NODELIST", "node[1-2]"},
    {"SLURM_JOB_NODELIST", "node[1-2]"},
    {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
    {"SLURM_TASKS_PER_NODE", "2(x2)"},
    {"SLURM_JOB_ID", "4242"},
};

TEST_CASE("slurm: srun -N2 --ntasks-per-node=2") {
  // The port follows PyTorch Lightning's rule: 15000 + the last four digits of the job id.
  CHECK(slurm_environment(environment_from(kSlurm)) == expected("slurm", 3, 4, 1, "node1", 19242));
  for (int rank = 0; rank < 4; ++rank) {
    const auto env = slurm_environment(
        environment_from(with(kSlurm, {{"SLURM_PROCID", std::to_string(rank)},
                                       {"SLURM_LOCALID", std::to_string(rank % 2)},
                                       {"SLURM_NODEID", std::to_string(rank / 2)}})));
    REQUIRE(env.has_value());
    CHECK(env->rank == rank);
    CHECK(env->local_rank == rank % 2);
    CHECK(env->master_addr == "node1");
    CHECK(env->master_port == 19242);
  }
}

TEST_CASE("slurm: where the store is") {
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_JOB_ID", "1234567"}})))
            ->master_port == 15000 + 4567);
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_JOB_ID", "7"}})))->master_port ==
        15007);
  CHECK(
      slurm_environment(environment_from(with(kSlurm, {{"MASTER_PORT", "23456"}})))->master_port ==
      23456);
  CHECK(slurm_environment(environment_from(with(
                              kSlurm, {{"MASTER_PORT", "23456"}, {"STRATA_STORE_PORT", "34567"}})))
            ->master_port == 34567);
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"MASTER_ADDR", "10.1.2.3"}})))
            ->master_addr == "10.1.2.3");
  // The step's node list wins over the job's; the job's is used without it.
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_JOB_NODELIST", "gpu[07-09]"}})))
            ->master_addr == "node1");
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_STEP_NODELIST", ""},
                                                         {"SLURM_JOB_NODELIST", "gpu[07-08]"}})))
            ->master_addr == "gpu07");
  CHECK(slurm_environment(
            environment_from(with(kSlurm, {{"SLURM_STEP_NODELIST", "rack[2-3]-n[08-09]"},
                                           {"SLURM_JOB_NODELIST", ""},
                                           {"SLURM_STEP_TASKS_PER_NODE", "1(x4)"},
                                           {"SLURM_TASKS_PER_NODE", ""},
                                           {"SLURM_LOCALID", "0"}})))
            ->master_addr == "rack2-n08");
}

TEST_CASE("slurm: optional variables") {
  // SLURM_NPROCS stands in for SLURM_NTASKS (older releases).
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_NTASKS", ""}})))->world_size == 4);
  // Without task counts, node ids or local ids.
  const Vars minimal = {{"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_JOB_NODELIST", "login1"},
                        {"SLURM_JOB_ID", "99"}};
  CHECK(slurm_environment(environment_from(minimal)) ==
        expected("slurm", 0, 2, 0, "login1", 15099));
  // Uneven task layouts: 3 tasks on the first node, 1 on the second.
  CHECK(slurm_environment(environment_from(with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "3,1"},
                                                         {"SLURM_TASKS_PER_NODE", "3,1"},
                                                         {"SLURM_PROCID", "2"},
                                                         {"SLURM_LOCALID", "2"},
                                                         {"SLURM_NODEID", "0"}})))
            ->local_rank == 2);
}

TEST_CASE("slurm: absent variables give nullopt") {
  CHECK_FALSE(slurm_environment(environment_from({})).has_value());
  // Inside salloc or an sbatch script without srun: a job, but no task.
  CHECK_FALSE(
      slurm_environment(environment_from(with(kSlurm, {{"SLURM_PROCID", ""}}))).has_value());
  CHECK_FALSE(slurm_environment(environment_from(kTorchrun)).has_value());
}

TEST_CASE("slurm: bad values are ConfigurationErrors naming the variable") {
  const auto resolve = [](const auto& env) { return slurm_environment(env); };
  check_rejected(resolve, with(kSlurm, {{"SLURM_NTASKS", ""}, {"SLURM_NPROCS", ""}}),
                 "SLURM_NTASKS", {"SLURM_NTASKS is not set", "start the program with srun"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_PROCID", "4"}}), "SLURM_PROCID",
                 {"the rank must be below SLURM_NTASKS=4"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_PROCID", "x"}}), "SLURM_PROCID", {"'x'"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_NTASKS", "0"}}), "SLURM_NTASKS",
                 {"a job has at least one process"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_NTASKS", ""}, {"SLURM_NPROCS", "-3"}}),
                 "SLURM_NPROCS", {"it is negative"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_LOCALID", "-1"}}), "SLURM_LOCALID",
                 {"it is negative"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_LOCALID", "2"}}), "SLURM_LOCALID",
                 {"node 1 runs 2 tasks according to SLURM_STEP_TASKS_PER_NODE"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_NODEID", "2"}}), "SLURM_NODEID",
                 {"SLURM_STEP_TASKS_PER_NODE describes only 2 nodes"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_STEP_NODELIST", "node[2-1]"}}),
                 "SLURM_STEP_NODELIST", {"'node[2-1]'", "the range 2-1 is reversed"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_STEP_NODELIST", ""}, {"SLURM_JOB_NODELIST", "n["}}),
                 "SLURM_JOB_NODELIST", {"'[' without a matching ']'"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "2(x0)"}}),
                 "SLURM_STEP_TASKS_PER_NODE", {"a repeat count of 0"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}}),
                 "SLURM_STEP_TASKS_PER_NODE",
                 {"cannot use '2(x3)': it adds up to 6 tasks but SLURM_NTASKS=4"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", "1(x4)"}}),
                 "SLURM_STEP_TASKS_PER_NODE",
                 {"it describes 4 nodes but SLURM_STEP_NODELIST lists 2"});
  check_rejected(resolve,
                 with(kSlurm, {{"SLURM_STEP_TASKS_PER_NODE", ""}, {"SLURM_TASKS_PER_NODE", "3"}}),
                 "SLURM_TASKS_PER_NODE", {"it adds up to 3 tasks but SLURM_NTASKS=4"});
  check_rejected(
      resolve,
      with(kSlurm, {{"SLURM_STEP_NODELIST", ""}, {"SLURM_JOB_NODELIST", ""}, {"MASTER_ADDR", ""}}),
      "SLURM_STEP_NODELIST",
      {"none of SLURM_STEP_NODELIST, SLURM_JOB_NODELIST and MASTER_ADDR is set"});
  check_rejected(
      resolve, with(kSlurm, {{"SLURM_JOB_ID", ""}}), "SLURM_JOB_ID",
      {"none of STRATA_STORE_PORT, MASTER_PORT and SLURM_JOB_ID is set", "set STRATA_STORE_PORT"});
  check_rejected(resolve, with(kSlurm, {{"SLURM_JOB_ID", "12_3"}}), "SLURM_JOB_ID",
                 {"'12_3'", "not a non-negative decimal number"});
  check_rejected(resolve, with(kSlurm, {{"MASTER_PORT", "0"}}), "MASTER_PORT",
                 {"port 0 cannot be agreed on"});
  check_rejected(resolve, with(kSlurm, {{"STRATA_STORE_PORT", "65536"}}), "STRATA_STORE_PORT",
                 {"it is larger than 65535"});
}

}  // namespace
