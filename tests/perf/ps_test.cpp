// Tests for strata-perf's --transport ps (benchmarks/perf/ps_rows.hpp, ps_report.hpp): its
// command line, the bus bandwidth and the split of a variable over the servers, the footer's
// targets, and brief runs of the mode itself: parameter servers on threads of the test, workers
// on threads with a LocalCommunicator between them, every value pulled back checked (none wrong),
// and a client that damages what it pulls, or writes past it, caught by the check.
//
// The headers live with the benchmark, in strata_perf_core, which these tests link.
#include <perf/ps_report.hpp>
#include <perf/ps_rows.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <strata/communicator/local.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/server.hpp>

#include "worker_cluster.hpp"

namespace {

using namespace strata::perf;
using strata::DataType;
using strata::ps::ShardCall;

Options parse(std::vector<std::string_view> args) {
  return parse_options(args);
}

std::string error_of(std::vector<std::string_view> args) {
  try {
    parse(std::move(args));
  } catch (const CommandLineError& error) {
    return error.what();
  }
  return "";
}

// Servers of `spec` on threads of the test, serving until every worker has said it finished.
struct Servers {
  explicit Servers(const strata::cluster::ClusterSpec& spec) {
    const auto n = static_cast<int>(spec.num_tasks(strata::cluster::TaskType::ps));
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<strata::ps::Server>(spec, i));
      strata::ps::Server* server = servers.back().get();
      reports.push_back(std::async(std::launch::async, [server] { return server->serve(); }));
    }
  }
  ~Servers() {
    for (auto& server : servers)
      server->stop();
    for (auto& report : reports)
      if (report.valid()) report.wait();
  }
  std::vector<std::unique_ptr<strata::ps::Server>> servers;
  std::vector<std::future<strata::ps::ServerReport>> reports;
};

using Comm = strata::communicator::LocalCommunicator<>;

// Runs `body(comm, client)` on one thread per worker of `spec`, each with its client; tells the
// servers every worker finished. Rethrows the first worker's error.
void run_workers(const strata::cluster::ClusterSpec& spec,
                 const std::function<void(Comm&, strata::ps::Client&)>& body) {
  const int workers = spec.collective_size();
  auto group = Comm::create(workers);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
  {
    std::vector<std::jthread> threads;
    for (int r = 0; r < workers; ++r)
      threads.emplace_back([&, r] {
        auto& comm = group[static_cast<std::size_t>(r)];
        try {
          strata::ps::Client client(spec, r, 1);
          body(comm, client);
          client.done();
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          comm.abort("a worker failed");
        }
      });
  }
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

enum class Fault { none, wrong_value, write_past_end };

// A client that damages what push_pull brings back: the first element of the first shard, or
// the element after the last shard's values.
class FaultyClient {
 public:
  FaultyClient(strata::ps::Client& client, Fault fault) : client_(client), fault_(fault) {}

  int num_servers() const { return client_.num_servers(); }
  strata::ps::Client::Created create(int server, std::string_view name, DataType type,
                                     strata::ps::UpdateRule update,
                                     std::span<const std::byte> initial,
                                     std::span<std::byte> current) {
    return client_.create(server, name, type, update, initial, current);
  }
  void call(int lane, std::span<ShardCall> calls) {
    client_.call(lane, calls);
    if (calls.empty() || calls.front().operation != strata::ps::Operation::push_pull) return;
    const std::size_t element = strata::size_of(calls.front().type);
    if (fault_ == Fault::wrong_value) std::memset(calls.front().result.data(), 0x7f, element);
    if (fault_ == Fault::write_past_end) {
      const auto last = calls.back().result;
      std::memset(last.data() + last.size(), 0, element);  // within the guard PsRows allocates
    }
  }

 private:
  strata::ps::Client& client_;
  Fault fault_;
};

// Every worker's rows of one sweep of push_pull (elements T), with the client damaged by `fault`.
template <class T>
std::vector<std::vector<Row>> sweep(const strata::cluster::ClusterSpec& spec,
                                    const Options& options, Fault fault) {
  const int workers = spec.collective_size();
  std::vector<std::vector<Row>> rows(static_cast<std::size_t>(workers));
  run_workers(spec, [&](Comm& comm, strata::ps::Client& client) {
    FaultyClient faulty(client, fault);
    const auto points = sweep_points(options, sizeof(T), workers);
    PsRows<Comm, T, FaultyClient> producer(comm, faulty, options, points, {}, nullptr);
    for (const auto& point : points)
      rows[static_cast<std::size_t>(comm.rank())].push_back(producer(point));
  });
  return rows;
}

}  // namespace

TEST_CASE("--transport ps and push_pull name each other; what the servers cannot do is refused") {
  const Options named = parse({"push_pull"});
  CHECK(named.transport == Transport::ps);
  CHECK(operation_name(named) == "push_pull");
  CHECK(named.servers == 1);
  const Options flagged =
      parse({"--transport", "ps", "--ps", "2", "--ranks", "3", "-d", "double", "-b", "4"});
  CHECK(flagged.transport == Transport::ps);
  CHECK(flagged.servers == 2);
  CHECK(flagged.ranks == 3);
  CHECK(flagged.type == DataType::float64);
  CHECK(parse({"push_pull", "--transport=ps", "--ceiling"}).ceiling);
  CHECK(operation_name(parse({"all_gather"})) == "all_gather");

  CHECK(error_of({"push_pull", "--transport", "tcp"}).find("use --transport ps") !=
        std::string::npos);
  CHECK(error_of({"all_reduce", "--transport", "ps"}).find("measures push_pull") !=
        std::string::npos);
  CHECK(error_of({"all_reduce", "--ps", "2"}).find("--ps sets the parameter servers") !=
        std::string::npos);
  CHECK(error_of({"push_pull", "--ps", "0"}).find("outside") != std::string::npos);
  CHECK(error_of({"push_pull", "-d", "int32"}).find("float and double") != std::string::npos);
  CHECK(error_of({"push_pull", "-o", "max"}).find("UpdateRule::sum") != std::string::npos);
  CHECK(error_of({"push_pull", "--algo", "ring"}).find("push_pull has none") != std::string::npos);
  CHECK(error_of({"push_pull", "--congestion", "reno"}).find("--congestion") != std::string::npos);
  CHECK(error_of({"push_pull", "--compare"}).find("its own peers") != std::string::npos);
  CHECK(error_of({"--transport", "tcp"}).find("name a collective") != std::string::npos);
}

TEST_CASE("busbw counts push and pull through the busiest end; shards split as TF splits rows") {
  CHECK(ps_bus_bandwidth_factor(1, 1) == 2.0);
  CHECK(ps_bus_bandwidth_factor(1, 2) == 2.0);
  CHECK(ps_bus_bandwidth_factor(3, 2) == 3.0);
  CHECK(ps_bus_bandwidth_factor(4, 1) == 8.0);
  CHECK(ps_bus_bandwidth_factor(4, 2) == 4.0);

  const auto shards = split_over_servers(10, 4);
  REQUIRE(shards.size() == 4);
  const std::size_t sizes[] = {3, 3, 2, 2};
  const std::size_t offsets[] = {0, 3, 6, 8};
  for (std::size_t s = 0; s < 4; ++s) {
    CHECK(shards[s].server == static_cast<int>(s));
    CHECK(shards[s].size == sizes[s]);
    CHECK(shards[s].offset == offsets[s]);
  }
  const auto one = split_over_servers(1, 2);
  REQUIRE(one.size() == 1);
  CHECK(one[0].size == 1);
  CHECK(split_over_servers(0, 2).empty());
}

TEST_CASE("the footer states each target and whether this run met it") {
  std::vector<PsPoint> points(2);
  points[0].bytes = 4;
  points[0].time_us = 20;
  points[0].stream = PsStream{12, 10};
  points[1].bytes = std::size_t{16} << 20;
  points[1].time_us = 40000;
  points[1].busbw_gbps = 2.0 * static_cast<double>(points[1].bytes) / 40000e3;
  points[1].stream = PsStream{30000, 20000};  // ceiling 16 MiB / 20 ms
  points[1].server_us_per_call = 1234.5;
  points[1].server_ns_per_byte = 0.5;
  const PsPingPong ping_pong{4, 8, 50};
  const std::string met = format_ps_footer(points, ping_pong, 1, 1, "bbr");
  CAPTURE(met);
  CHECK(met.find("push_pull = 2.50× the polling round trip (target <= 2×: not met)") !=
        std::string::npos);
  // 2 · 16 MiB / 40 ms against 16 MiB / 20 ms: the same rate.
  CHECK(met.find("from 16M: busbw = 16M 100% of the one-direction TCP ceiling (target for 1 worker "
                 "+ 1 ps: >= 70%: met)") != std::string::npos);
  CHECK(met.find("bbr (us)") != std::string::npos);
  // Other shapes get the shares without a verdict; without peers, no target lines.
  CHECK(format_ps_footer(points, ping_pong, 2, 1, "bbr").find("70%)") != std::string::npos);
  points[1].stream.reset();
  const std::string bare = format_ps_footer(points, std::nullopt, 1, 1, "bbr");
  CHECK(bare.find("target") == std::string::npos);
}

TEST_CASE("push_pull over parameter servers on threads: every value pulled back is checked") {
  const Options options = parse({"push_pull", "-b", "4", "-e", "64K", "-f", "16", "-w", "1", "-n",
                                 "2", "--ranks", "2", "--ps", "2"});

  SUBCASE("float, 2 workers, 2 servers: nothing wrong, out of place and in place") {
    const auto spec = strata::testing::loopback_ps_cluster(2, 2);
    Servers servers(spec);
    const auto rows = sweep<float>(spec, options, Fault::none);
    for (const auto& worker : rows) {
      REQUIRE(worker.size() == 4);  // 4 B, 64 B, 1 KiB, 16 KiB
      for (const Row& row : worker) {
        CAPTURE(row.bytes);
        CHECK(row.out_of_place.wrong == std::optional<std::int64_t>(0));
        CHECK(row.in_place.wrong == std::optional<std::int64_t>(0));
        CHECK(row.out_of_place.time_us > 0);
        CHECK(row.out_of_place.busbw_gbps == doctest::Approx(2 * row.out_of_place.algbw_gbps));
      }
    }
    for (auto& report : servers.reports)
      CHECK(report.get().requests > 0);
  }

  SUBCASE("double, 3 workers, 1 server: run_ps_rank's verdict") {
    Options three = options;
    three.ranks = 3;
    three.servers = 1;
    three.type = DataType::float64;
    const auto spec = strata::testing::loopback_ps_cluster(3, 1);
    Servers servers(spec);
    std::vector<int> status(3, -1);
    run_workers(spec, [&](Comm& comm, strata::ps::Client& client) {
      status[static_cast<std::size_t>(comm.rank())] =
          run_ps_rank(comm, client, three, "thread", nullptr, PsRankSetup{});
    });
    CHECK(status == std::vector<int>{0, 0, 0});
  }

  for (const Fault fault : {Fault::wrong_value, Fault::write_past_end}) {
    CAPTURE(static_cast<int>(fault));
    const auto spec = strata::testing::loopback_ps_cluster(2, 2);
    Servers servers(spec);
    const auto rows = sweep<float>(spec, options, fault);
    for (const Row& row : rows.front()) {
      CAPTURE(row.bytes);
      // Each worker's checked push_pull is damaged once, out of place and in place.
      CHECK(row.out_of_place.wrong == std::optional<std::int64_t>(2));
      CHECK(row.out_of_place.ranks_wrong == 2);
      CHECK(row.in_place.wrong == std::optional<std::int64_t>(2));
    }
  }
}
