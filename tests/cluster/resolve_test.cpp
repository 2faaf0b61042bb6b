// Tests of strata/cluster/resolve.hpp: which source resolve_cluster() picks, what it returns
// for each, its errors, and the store-based launchers end to end (every rank a thread that
// resolves, then forms a TcpCommunicator over what it resolved).
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <strata/cluster/tf_config.hpp>
#include <strata/communicator/tcp.hpp>
#include <strata/core/error.hpp>
#include <strata/resolve.hpp>

namespace {

using namespace std::chrono_literals;
using strata::cluster::Address;
using strata::cluster::ClusterSpec;
using strata::cluster::environment_from;
using strata::cluster::ResolvedCluster;
using strata::cluster::ResolveOptions;
using strata::cluster::TaskType;
using Vars = std::map<std::string, std::string>;

ResolveOptions options_with(Vars vars) {
  ResolveOptions options;
  options.environment = environment_from(std::move(vars));
  options.timeout = 10s;
  return options;
}

ClusterSpec chief_two_workers_ps() {
  ClusterSpec cluster;
  cluster.add({TaskType::chief, 0}, {"host-c", 2222});
  cluster.add({TaskType::worker, 0}, {"host-w0", 2222});
  cluster.add({TaskType::worker, 1}, {"host-w1", 2222});
  cluster.add({TaskType::ps, 0}, {"host-p", 2222});
  return cluster;
}

std::uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  REQUIRE(address.ss_family == AF_INET);
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

template <class Error>
std::string error_of(const ResolveOptions& options) {
  try {
    strata::resolve_cluster(options);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("resolve_cluster did not throw the expected error");
  return {};
}

// Every rank resolves `vars_of(rank)` on its own thread, then forms a TCP group from the
// result and sums its rank: the resolved addresses and listeners must make a working group.
std::vector<ResolvedCluster> resolve_and_join(int n, const std::function<Vars(int)>& vars_of) {
  std::vector<ResolvedCluster> resolved(static_cast<std::size_t>(n));
  std::vector<std::int64_t> sums(static_cast<std::size_t>(n), -1);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        try {
          resolved[i] = strata::resolve_cluster(options_with(vars_of(r)));
          // What membership_of takes over: remember the port before the communicator owns it.
          const auto listener_port = resolved[i].listener.get() >= 0
                                         ? bound_port(resolved[i].listener.get())
                                         : std::uint16_t{0};
          CHECK(listener_port ==
                resolved[i].addresses[static_cast<std::size_t>(resolved[i].rank)].port);
          strata::communicator::TcpCommunicator comm(
              strata::communicator::membership_of(resolved[i]), {}, {.timeout = 10s});
          std::int64_t value = r;
          comm.all_reduce(std::span(&value, 1), strata::ReduceOp::sum);
          sums[i] = value;
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
  }
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  for (int r = 0; r < n; ++r)
    CHECK(sums[static_cast<std::size_t>(r)] == n * (n - 1) / 2);
  return resolved;
}

}  // namespace

TEST_CASE("nothing set: a one-worker cluster that needs no network") {
  const auto resolved = strata::resolve_cluster(options_with({}));
  CHECK(resolved.source == "none");
  CHECK(resolved.rank == 0);
  CHECK(resolved.size == 1);
  CHECK(resolved.local_rank == 0);
  CHECK(resolved.is_chief());
  CHECK(resolved.in_collective_group());
  CHECK(resolved.task.type == TaskType::worker);
  CHECK(resolved.task.index == 0);
  CHECK(resolved.cluster.empty());  // as TF's resolver without TF_CONFIG
  REQUIRE(resolved.addresses.size() == 1);
  CHECK(resolved.listener.get() < 0);
  // It forms a group of one, which runs collectives locally.
  auto resolved_again = strata::resolve_cluster(options_with({}));
  strata::communicator::TcpCommunicator comm(strata::communicator::membership_of(resolved_again));
  std::vector<float> data{1.0F, 2.0F};
  comm.all_reduce(std::span(data), strata::ReduceOp::sum);
  CHECK(data == std::vector<float>{1.0F, 2.0F});
}

TEST_CASE("explicit arguments win over every variable") {
  auto options = options_with(
      {{"TF_CONFIG", R"({"cluster":{"worker":["a:1"]}})"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  options.cluster = chief_two_workers_ps();
  options.task = strata::cluster::Task{TaskType::worker, 1};
  const auto resolved = strata::resolve_cluster(options);
  CHECK(resolved.source == "explicit");
  CHECK(resolved.rank == 2);  // chief 0, worker 0 → 1, worker 1 → 2
  CHECK(resolved.size == 3);
  CHECK_FALSE(resolved.is_chief());
  CHECK(resolved.addresses ==
        std::vector<Address>{{"host-c", 2222}, {"host-w0", 2222}, {"host-w1", 2222}});
}

TEST_CASE("explicit arguments must come in pairs") {
  auto options = options_with({});
  options.cluster = chief_two_workers_ps();
  CHECK(error_of<strata::UsageError>(options).find("only one of ResolveOptions::cluster") !=
        std::string::npos);
  options.cluster.reset();
  options.task = strata::cluster::Task{TaskType::worker, 0};
  CHECK(error_of<strata::UsageError>(options).find("set both, or neither") != std::string::npos);
}

TEST_CASE("TF_CONFIG wins over torchrun, OpenMPI and SLURM variables") {
  const std::string tf_config =
      strata::cluster::make_tf_config(chief_two_workers_ps(), {TaskType::chief, 0});
  const auto resolved = strata::resolve_cluster(options_with({{"TF_CONFIG", tf_config},
                                                              {"RANK", "1"},
                                                              {"WORLD_SIZE", "2"},
                                                              {"MASTER_ADDR", "127.0.0.1"},
                                                              {"OMPI_COMM_WORLD_RANK", "1"},
                                                              {"OMPI_COMM_WORLD_SIZE", "2"},
                                                              {"SLURM_PROCID", "1"},
                                                              {"SLURM_NTASKS", "2"}}));
  CHECK(resolved.source == "TF_CONFIG");
  CHECK(resolved.rank == 0);
  CHECK(resolved.is_chief());
  CHECK(resolved.size == 3);
  CHECK(resolved.cluster == chief_two_workers_ps());
}

TEST_CASE("TF_CONFIG: ps and evaluator tasks are outside the collective group") {
  const auto resolved = strata::resolve_cluster(options_with(
      {{"TF_CONFIG", strata::cluster::make_tf_config(chief_two_workers_ps(), {TaskType::ps, 0})}}));
  CHECK(resolved.rank == -1);
  CHECK_FALSE(resolved.in_collective_group());
  CHECK_FALSE(resolved.is_chief());
  CHECK(resolved.addresses.empty());
  auto copy = strata::resolve_cluster(options_with(
      {{"TF_CONFIG", strata::cluster::make_tf_config(chief_two_workers_ps(), {TaskType::ps, 0})}}));
  CHECK_THROWS_WITH_AS(strata::communicator::membership_of(copy),
                       doctest::Contains("is not a member of the collective group"),
                       strata::ConfigurationError);
}

TEST_CASE("TF_CONFIG: local ranks count the earlier ranks on the same host") {
  ClusterSpec cluster;
  cluster.add({TaskType::worker, 0}, {"a", 1});
  cluster.add({TaskType::worker, 1}, {"b", 1});
  cluster.add({TaskType::worker, 2}, {"a", 2});
  const auto resolved = strata::resolve_cluster(options_with(
      {{"TF_CONFIG", strata::cluster::make_tf_config(cluster, {TaskType::worker, 2})}}));
  CHECK(resolved.local_rank == 1);
}

TEST_CASE("TF_CONFIG without a task: fine for one member, an error for more") {
  const auto one =
      strata::resolve_cluster(options_with({{"TF_CONFIG", R"({"cluster":{"worker":["h:5"]}})"}}));
  CHECK(one.rank == 0);
  CHECK(one.size == 1);
  CHECK(one.task.type == TaskType::worker);
  const auto error = error_of<strata::ConfigurationError>(
      options_with({{"TF_CONFIG", R"({"cluster":{"worker":["h:5","h:6"]}})"}}));
  CHECK(error.find("TF_CONFIG has a cluster but no \"task\"") != std::string::npos);
}

TEST_CASE("TF_CONFIG: a task the cluster does not list") {
  const auto error = error_of<strata::ConfigurationError>(options_with(
      {{"TF_CONFIG",
        R"({"cluster":{"worker":["h:5","h:6"]},"task":{"type":"worker","index":2}})"}}));
  CHECK(error.find("worker") != std::string::npos);
  CHECK(error.find("2") != std::string::npos);
}

TEST_CASE("an empty TF_CONFIG counts as unset") {
  const auto resolved = strata::resolve_cluster(options_with({{"TF_CONFIG", ""}}));
  CHECK(resolved.source == "none");
}

TEST_CASE("torchrun with one process: no store, no network") {
  const auto resolved = strata::resolve_cluster(options_with(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}}));
  CHECK(resolved.source == "torchrun");
  CHECK(resolved.size == 1);
  CHECK(resolved.cluster.empty());
  CHECK(resolved.listener.get() < 0);
}

TEST_CASE("torchrun, 3 processes: addresses exchanged through the store, group formed") {
  const std::string port = std::to_string(free_port());
  const auto resolved = resolve_and_join(3, [&](int r) {
    return Vars{{"RANK", std::to_string(r)},       {"WORLD_SIZE", "3"},
                {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", "3"},
                {"MASTER_ADDR", "127.0.0.1"},      {"MASTER_PORT", port}};
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const auto& one = resolved[static_cast<std::size_t>(r)];
    CHECK(one.source == "torchrun");
    CHECK(one.rank == r);
    CHECK(one.local_rank == r);
    CHECK(one.is_chief() == (r == 0));
    CHECK(one.addresses == resolved[0].addresses);
    CHECK(one.addresses[static_cast<std::size_t>(r)].host == "127.0.0.1");
    CHECK(one.cluster.collective_size() == 3);
  }
}

TEST_CASE("OpenMPI, 2 processes: master from MASTER_ADDR, group formed") {
  const std::string port = std::to_string(free_port());
  const auto resolved = resolve_and_join(2, [&](int r) {
    return Vars{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(r)},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", port}};
  });
  CHECK(resolved[0].source == "openmpi");
  CHECK(resolved[1].rank == 1);
}

TEST_CASE("SLURM, 2 tasks: group formed over the store") {
  const std::string port = std::to_string(free_port());
  const auto resolved = resolve_and_join(2, [&](int r) {
    return Vars{{"SLURM_PROCID", std::to_string(r)},
                {"SLURM_NTASKS", "2"},
                {"SLURM_LOCALID", std::to_string(r)},
                {"SLURM_NODEID", "0"},
                {"SLURM_STEP_NODELIST", "localhost"},
                {"SLURM_STEP_TASKS_PER_NODE", "2"},
                {"SLURM_JOB_ID", "77"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", port}};
  });
  CHECK(resolved[0].source == "slurm");
  CHECK(resolved[1].rank == 1);
}

TEST_CASE("a store-based launcher whose master never comes times out naming it") {
  auto options = options_with({{"RANK", "1"},
                               {"WORLD_SIZE", "2"},
                               {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(free_port())}});
  options.timeout = 500ms;
  const auto start = std::chrono::steady_clock::now();
  const auto error = error_of<strata::TimeoutError>(options);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(error.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("the cluster layer takes the address exchange it is given, and asks for one") {
  const Vars torchrun = {{"RANK", "1"},
                         {"WORLD_SIZE", "3"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "3"},
                         {"MASTER_ADDR", "10.1.2.3"},
                         {"MASTER_PORT", "29500"}};
  // No exchange: torchrun does not say where ranks 1 and 2 listen.
  std::string error;
  try {
    strata::cluster::resolve_cluster(options_with(torchrun));
  } catch (const strata::UsageError& e) {
    error = e.what();
  }
  CHECK(error.find("ResolveOptions::exchange is unset") != std::string::npos);
  CHECK(error.find("strata::resolve_cluster()") != std::string::npos);

  // An exchange of the program's own: its addresses become the cluster, its listener is kept.
  auto with = options_with(torchrun);
  int calls = 0;
  with.exchange = [&](const strata::cluster::LauncherEnvironment& launcher,
                      std::chrono::milliseconds timeout) {
    ++calls;
    CHECK(launcher.rank == 1);
    CHECK(launcher.world_size == 3);
    CHECK(launcher.master_addr == "10.1.2.3");
    CHECK(timeout == 10s);
    strata::cluster::ExchangedAddresses exchanged;
    for (int r = 0; r < launcher.world_size; ++r)
      exchanged.addresses.push_back({fmt::format("10.1.2.{}", 3 + r), 4000});
    return exchanged;
  };
  const auto resolved = strata::cluster::resolve_cluster(std::move(with));
  CHECK(calls == 1);
  CHECK(resolved.source == "torchrun");
  CHECK(resolved.rank == 1);
  CHECK(resolved.size == 3);
  REQUIRE(resolved.addresses.size() == 3);
  CHECK(resolved.addresses[2] == Address{"10.1.2.5", 4000});
  CHECK(resolved.listener.get() == -1);
}

TEST_CASE("STRATA_LOCAL_REPLICAS: the replicas of each worker, 1 when unset") {
  CHECK(strata::resolve_cluster(options_with({})).local_replicas == 1);
  CHECK(strata::resolve_cluster(options_with({{"STRATA_LOCAL_REPLICAS", "3"}})).local_replicas ==
        3);
  CHECK(strata::resolve_cluster(options_with({{"STRATA_LOCAL_REPLICAS", ""}})).local_replicas == 1);
  for (const char* bad : {"0", "-2", "x", "2x", "4097"}) {
    CAPTURE(bad);
    const std::string error =
        error_of<strata::ConfigurationError>(options_with({{"STRATA_LOCAL_REPLICAS", bad}}));
    CHECK(error.find("is not a number of replicas") != std::string::npos);
  }
}
