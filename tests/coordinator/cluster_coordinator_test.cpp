// ClusterCoordinator and the workers' servers in one process, on loopback: results, errors and
// their clearing, cancellation, per-worker resources, a full queue, a lost worker, deadlines.
// Real processes, killed and stopped: process_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/protocol.hpp>
#include <strata/coordinator/worker_server.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/service_client.hpp>

#include <asio/connect.hpp>
#include <asio/write.hpp>

#include "resident_memory.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using strata::cluster::TaskType;
using strata::coordinator::ClusterCoordinator;
using strata::coordinator::CoordinatorOptions;
using strata::coordinator::Functions;
using strata::coordinator::PerWorker;
using strata::coordinator::Worker;
using strata::coordinator::WorkerServer;

// The workers of `spec`, each serving `functions` on a thread of its own.
struct WorkerThreads {
  WorkerThreads(const strata::cluster::ClusterSpec& spec, const Functions& functions,
                std::chrono::milliseconds timeout = 20s) {
    const int n = static_cast<int>(spec.num_tasks(TaskType::worker));
    for (int i = 0; i < n; ++i)
      servers.push_back(std::make_unique<WorkerServer>(
          spec, i, functions, strata::coordinator::WorkerOptions{.timeout = timeout}));
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this, i] {
        try {
          reports[static_cast<std::size_t>(i)] = servers[static_cast<std::size_t>(i)]->serve();
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(i)] = e.what();
        }
      });
    reports.resize(static_cast<std::size_t>(n));
    errors.resize(static_cast<std::size_t>(n));
  }
  ~WorkerThreads() {
    for (auto& server : servers)
      server->stop();
    for (auto& thread : threads)
      thread.join();
  }
  void wait() {
    for (auto& thread : threads)
      thread.join();
    threads.clear();
  }
  std::vector<std::unique_ptr<WorkerServer>> servers;
  std::vector<std::thread> threads;
  std::vector<strata::coordinator::WorkerReport> reports{};
  std::vector<std::string> errors{};
};

}  // namespace

TEST_CASE("scheduled functions run on the workers and their results come back") {
  const auto spec = strata::testing::loopback_coordinator_cluster(3, 0);
  Functions functions;
  const auto square = functions.add("square", [](Worker&, std::int64_t x) { return x * x; });
  const auto where = functions.add("where", [](Worker& w) { return w.index(); });
  const auto total = functions.add("total", [](Worker&, std::vector<double> v, std::string tag) {
    return tag + ":" + std::to_string(std::accumulate(v.begin(), v.end(), 0.0));
  });
  std::atomic<int> touched{0};
  const auto touch = functions.add("touch", [&](Worker&) { ++touched; });
  WorkerThreads workers(spec, functions);
  {
    ClusterCoordinator coordinator(spec);
    CHECK(coordinator.num_workers() == 3);
    std::vector<strata::coordinator::RemoteValue<std::int64_t>> squares;
    for (std::int64_t i = -50; i < 250; ++i)
      squares.push_back(coordinator.schedule(square, i));
    std::vector<strata::coordinator::RemoteValue<int>> places;
    for (int i = 0; i < 60; ++i)
      places.push_back(coordinator.schedule(where));
    const auto text = coordinator.schedule(total, std::vector<double>{1.5, 2.5, 3.0}, "sum");
    const auto empty = coordinator.schedule(total, std::vector<double>{}, "");
    for (int i = 0; i < 7; ++i)
      coordinator.schedule(touch);
    coordinator.join();
    CHECK(coordinator.done());
    for (std::int64_t i = -50; i < 250; ++i) {
      const auto& value = squares[static_cast<std::size_t>(i + 50)];
      REQUIRE(value.ready());
      CHECK(value.fetch() == i * i);
    }
    std::map<int, int> per_worker;
    for (const auto& place : places)
      ++per_worker[place.fetch()];
    for (const auto& [index, count] : per_worker)
      CHECK((index >= 0 && index < 3));
    CHECK(text.fetch() == "sum:7.000000");
    CHECK(empty.fetch() == ":0.000000");
    CHECK(touched.load() == 7);
    const auto report = coordinator.report();
    CHECK(report.scheduled == 369);
    CHECK(report.succeeded == 369);
    CHECK(report.failed == 0);
    CHECK(report.retried == 0);
    CHECK(report.connections == 3);
  }
  workers.wait();
  std::uint64_t ran = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(workers.errors[i].empty());
    ran += workers.reports[i].functions_run;
  }
  CHECK(ran == 369);
}

TEST_CASE("a function's error is raised once by join, and the queued functions are cancelled") {
  const auto spec = strata::testing::loopback_coordinator_cluster(1, 0);
  Functions functions;
  std::atomic<bool> go{false};
  const auto maybe_fail = functions.add("maybe_fail", [&](Worker&, int x) {
    // The failure waits until everything is queued: schedule would raise it otherwise.
    while (x == 3 && !go.load())
      std::this_thread::sleep_for(1ms);
    if (x == 3) throw std::runtime_error("three is not allowed");
    if (x == 4)
      throw strata::UsageError(7, "my_call", "four is not allowed either", "pass another number");
    std::this_thread::sleep_for(1ms);
    return x;
  });
  WorkerThreads workers(spec, functions);
  ClusterCoordinator coordinator(spec);
  std::vector<strata::coordinator::RemoteValue<int>> values;
  for (int i = 0; i < 50; ++i)
    values.push_back(coordinator.schedule(maybe_fail, i == 3 ? 3 : i));
  go = true;
  try {
    coordinator.join();
    FAIL("join raised nothing");
  } catch (const strata::FunctionError& e) {
    const std::string what = e.what();
    CHECK(what.find("function 'maybe_fail'") != std::string::npos);
    CHECK(what.find("worker 0") != std::string::npos);
    CHECK(what.find("three is not allowed") != std::string::npos);
  }
  // The error is cleared: join returns once what ran has run, and the rest was cancelled.
  coordinator.join();
  CHECK(coordinator.done());
  int ok = 0;
  int failed = 0;
  int cancelled = 0;
  for (const auto& value : values) {
    try {
      value.fetch();
      ++ok;
    } catch (const strata::FunctionError&) {
      ++failed;
    } catch (const strata::CancelledError& e) {
      CHECK(std::string(e.what()).find("maybe_fail") != std::string::npos);
      ++cancelled;
    }
  }
  CHECK(failed == 1);
  CHECK(ok == 3);  // 0, 1 and 2 ran before the failure; one worker runs one at a time
  CHECK(cancelled == 46);
  const auto report = coordinator.report();
  CHECK(report.cancelled == static_cast<std::uint64_t>(cancelled));

  // Scheduling again works; a strata error keeps its class and root cause.
  CHECK(coordinator.schedule(maybe_fail, 5).fetch() == 5);
  const auto four = coordinator.schedule(maybe_fail, 4);
  CHECK_THROWS_AS(coordinator.join(), strata::UsageError);
  try {
    four.fetch();
    FAIL("fetch raised nothing");
  } catch (const strata::UsageError& e) {
    CHECK(std::string(e.what()).find("rank 7 in my_call: four is not allowed") !=
          std::string::npos);
  }
  // A later schedule raises an error that nobody raised yet.
  const auto failed_before = coordinator.report().failed;
  coordinator.schedule(maybe_fail, 3);
  for (int i = 0; i < 1000 && coordinator.report().failed == failed_before; ++i)
    std::this_thread::sleep_for(5ms);
  CHECK_THROWS_AS(coordinator.schedule(maybe_fail, 1), strata::FunctionError);
  CHECK(coordinator.done());
}

TEST_CASE("per-worker resources are built once on every worker and read by the functions") {
  const auto spec = strata::testing::loopback_coordinator_cluster(2, 0);
  Functions functions;
  std::atomic<int> built{0};
  struct Counter {
    int worker = 0;
    std::int64_t base = 0;
    std::int64_t calls = 0;
  };
  const auto counter = functions.add_resource("counter", [&](Worker& w, std::int64_t base) {
    ++built;
    return Counter{w.index(), base, 0};
  });
  const auto bump = functions.add("bump", [](Worker& w, PerWorker<Counter> c) {
    Counter& mine = w.get(c);
    CHECK(mine.worker == w.index());
    return std::pair<int, std::int64_t>{mine.worker, mine.base + ++mine.calls};
  });
  const auto wrong = functions.add("wrong", [](Worker& w, PerWorker<int> c) { return w.get(c); });
  WorkerThreads workers(spec, functions);
  ClusterCoordinator coordinator(spec);
  const auto handle = coordinator.create_per_worker(counter, std::int64_t{1000});
  std::vector<strata::coordinator::RemoteValue<std::pair<int, std::int64_t>>> values;
  for (int i = 0; i < 100; ++i)
    values.push_back(coordinator.schedule(bump, handle));
  coordinator.join();
  std::map<int, std::vector<std::int64_t>> seen;
  for (const auto& value : values) {
    const auto [worker, count] = value.fetch();
    seen[worker].push_back(count);
  }
  std::int64_t total = 0;
  for (auto& [worker, counts] : seen) {
    std::sort(counts.begin(), counts.end());
    for (std::size_t k = 0; k < counts.size(); ++k)
      CHECK(counts[k] == 1001 + static_cast<std::int64_t>(k));  // each worker's own counter
    total += static_cast<std::int64_t>(counts.size());
  }
  CHECK(total == 100);
  // Every worker builds it, one that ran none of the functions too; but a worker that connected
  // late may build it after join returned, so the check waits (within a deadline) for it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (built.load() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(built.load() == 2);
  // A resource read as another type is the function's usage error.
  coordinator.schedule(wrong, PerWorker<int>{handle.id});
  CHECK_THROWS_AS(coordinator.join(), strata::UsageError);
}

TEST_CASE("a function the workers lack, or with other types there, is an error naming it") {
  const auto spec = strata::testing::loopback_coordinator_cluster(1, 0);
  Functions on_workers;
  on_workers.add("f", [](Worker&, int x) { return x; });
  Functions on_chief;
  const auto f = on_chief.add("f", [](Worker&, double x) { return x; });
  const auto g = on_chief.add("g", [](Worker&) {});
  WorkerThreads workers(spec, on_workers);
  ClusterCoordinator coordinator(spec);
  coordinator.schedule(f, 1.0);
  try {
    coordinator.join();
    FAIL("join raised nothing");
  } catch (const strata::MismatchError& e) {
    CHECK(std::string(e.what()).find("'f' takes other types") != std::string::npos);
  }
  coordinator.schedule(g);
  try {
    coordinator.join();
    FAIL("join raised nothing");
  } catch (const strata::UsageError& e) {
    CHECK(std::string(e.what()).find("no function named 'g'") != std::string::npos);
  }
  CHECK_THROWS_AS(on_chief.add("g", [](Worker&) {}), strata::UsageError);
}

TEST_CASE("a full queue blocks schedule until workers free it") {
  const auto spec = strata::testing::loopback_coordinator_cluster(2, 0);
  Functions functions;
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  const auto slow = functions.add("slow", [&](Worker&, int x) {
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(2ms);
    --running;
    return x;
  });
  WorkerThreads workers(spec, functions);
  ClusterCoordinator coordinator(spec, CoordinatorOptions{.queue_capacity = 2});
  std::vector<strata::coordinator::RemoteValue<int>> values;
  for (int i = 0; i < 40; ++i)
    values.push_back(coordinator.schedule(slow, i));
  coordinator.join();
  for (int i = 0; i < 40; ++i)
    CHECK(values[static_cast<std::size_t>(i)].fetch() == i);
  CHECK(most.load() <= 2);  // one function at a time per worker
}

TEST_CASE("a worker that stops serving loses its function to another worker") {
  const auto spec = strata::testing::loopback_coordinator_cluster(2, 0);
  Functions functions;
  std::atomic<int> runs{0};
  std::atomic<WorkerServer*> victim{nullptr};
  const auto step = functions.add("step", [&](Worker& w, int x) {
    ++runs;
    // The first function on worker 0 stops its server, which closes the connection once this
    // reply is out: the next request sent there is lost.
    if (w.index() == 0 && victim.load() != nullptr) victim.exchange(nullptr)->stop();
    return x + 1;
  });
  WorkerThreads workers(spec, functions);
  victim = workers.servers[0].get();
  ClusterCoordinator coordinator(spec);
  // One function at a time until worker 0 has run one.
  for (int i = 0; i < 2000 && victim.load() != nullptr; ++i)
    CHECK(coordinator.schedule(step, i).fetch() == i + 1);
  REQUIRE(victim.load() == nullptr);
  const auto before = coordinator.report();
  CHECK(before.worker_failures == 0);
  std::vector<strata::coordinator::RemoteValue<int>> values;
  for (int i = 0; i < 30; ++i)
    values.push_back(coordinator.schedule(step, i));
  coordinator.join();
  for (int i = 0; i < 30; ++i)
    CHECK(values[static_cast<std::size_t>(i)].fetch() == i + 1);
  const auto report = coordinator.report();
  CHECK(report.succeeded == before.succeeded + 30);
  CHECK(report.worker_failures == 1);
  CHECK(report.retried >= 1);
  // At least once: a request sent into the closing connection never ran; none ran twice here.
  CHECK(runs.load() == static_cast<int>(report.succeeded));
}

TEST_CASE("join has a deadline when no worker is up") {
  const auto spec = strata::testing::loopback_coordinator_cluster(2, 0);
  Functions functions;
  const auto f = functions.add("f", [](Worker&) {});
  ClusterCoordinator coordinator(spec,
                                 CoordinatorOptions{.timeout = 500ms, .closure_timeout = 400ms});
  const auto value = coordinator.schedule(f);
  const auto began = std::chrono::steady_clock::now();
  try {
    coordinator.join();
    FAIL("join raised nothing");
  } catch (const strata::TimeoutError& e) {
    const std::string what = e.what();
    CHECK(what.find("no scheduled function finished for 400 ms") != std::string::npos);
    CHECK(what.find("worker 1 (127.0.0.1") != std::string::npos);
    CHECK(what.find("down") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - began < 5s);
  CHECK_FALSE(value.ready());
  CHECK_THROWS_AS(value.fetch(), strata::TimeoutError);
}

TEST_CASE("the coordinator refuses clusters it cannot coordinate") {
  CHECK_THROWS_AS(ClusterCoordinator(strata::testing::loopback_cluster(2)),
                  strata::ConfigurationError);  // no chief
  strata::cluster::ClusterSpec chief_only;
  chief_only.add({TaskType::chief, 0}, {"127.0.0.1", 1});
  CHECK_THROWS_AS(ClusterCoordinator{chief_only}, strata::ConfigurationError);
  const auto spec = strata::testing::loopback_coordinator_cluster(1, 0);
  Functions functions;
  CHECK_THROWS_AS(WorkerServer(spec, 3, functions), strata::ConfigurationError);
}

TEST_CASE("a request that claims a gigabyte and sends a few bytes costs the worker no gigabyte") {
  const auto spec = strata::testing::loopback_coordinator_cluster(1, 0);
  Functions functions;
  const auto twice = functions.add("twice", [](Worker&, int x) { return 2 * x; });
  WorkerThreads workers(spec, functions);
  const strata::transport::tcp::ServiceIdentity mine{
      strata::coordinator::coordinator_fingerprint(spec),
      strata::coordinator::kTunables,
      spec.collective_size(),
      *spec.collective_rank({TaskType::chief, 0}),
      {}};
  std::string why;
  std::unique_ptr<strata::transport::tcp::ServiceConnection> link;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!link && std::chrono::steady_clock::now() < until) {
    link = strata::transport::tcp::ServiceConnection::connect(
        spec.address({TaskType::worker, 0}), mine, *spec.collective_rank({TaskType::worker, 0}), 0,
        1, until, "test", "worker 0", why);
    if (!link) std::this_thread::sleep_for(10ms);
  }
  REQUIRE_MESSAGE(link, why);
  const std::size_t before = strata::testing::resident_bytes();
  strata::transport::tcp::FrameHeader header;
  header.type = strata::transport::tcp::FrameType::request;
  header.kind = static_cast<strata::Collective>(strata::coordinator::Operation::run);
  header.element_type = strata::DataType::uint8;
  header.sequence = 1;
  header.count = std::uint64_t{1} << 30;
  header.payload_bytes = std::uint32_t{1} << 30;
  const std::array<std::byte, 16> few{};
  const std::array<std::span<const std::byte>, 1> parts{std::span(few)};
  REQUIRE(link->send(header, parts, until) == strata::transport::tcp::ServiceIo::done);
  // The worker has read the header and the 16 bytes well within this; a buffer of the claimed
  // size would be growing resident by now (it is zero-filled when made).
  constexpr std::size_t kLimit = std::size_t{128} << 20;
  CHECK(strata::testing::resident_growth(before, kLimit) < kLimit);
  link.reset();
  ClusterCoordinator coordinator(spec);
  CHECK(coordinator.schedule(twice, 21).fetch() == 42);
  coordinator.shutdown();
  workers.wait();
  CHECK(workers.errors[0].empty());
}

TEST_CASE("a worker drops connections that send garbage and serves the coordinator on") {
  const auto spec = strata::testing::loopback_coordinator_cluster(1, 0);
  Functions functions;
  const auto twice = functions.add("twice", [](Worker&, int x) { return 2 * x; });
  WorkerThreads workers(spec, functions);
  const auto& address = spec.address({TaskType::worker, 0});
  asio::io_context io;
  std::mt19937 random(5);
  for (int round = 0; round < 8; ++round) {
    asio::ip::tcp::socket socket(io);
    std::error_code ec;
    for (int attempt = 0; attempt < 200; ++attempt) {
      socket.connect({asio::ip::make_address(address.host), address.port}, ec);
      if (!ec) break;
      socket.close();
      std::this_thread::sleep_for(5ms);
    }
    REQUIRE_FALSE(ec);
    std::vector<unsigned char> garbage(4096);
    for (auto& b : garbage)
      b = static_cast<unsigned char>(random());
    asio::write(socket, asio::buffer(garbage), ec);
    // The worker closes it: a read ends with an error or EOF, not a hang.
    std::array<char, 256> sink{};
    std::size_t got = 0;
    while (!ec && got < 1'000'000)
      got += socket.read_some(asio::buffer(sink), ec);
    CHECK(ec);
  }
  ClusterCoordinator coordinator(spec);
  CHECK(coordinator.schedule(twice, 21).fetch() == 42);
  coordinator.shutdown();
  workers.wait();
  CHECK(workers.errors[0].empty());
  CHECK(workers.reports[0].refused == 8);
}
