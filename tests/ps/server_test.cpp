// Tests of the parameter server and its client (ps/server.hpp, ps/client.hpp): servers run on
// threads of the test, workers are clients on loopback.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <strata/core/error.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/server.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/shm/region.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/service_client.hpp>

#include "resident_memory.hpp"
#include "worker_cluster.hpp"

namespace {

using namespace std::chrono_literals;
using strata::ps::Client;
using strata::ps::Operation;
using strata::ps::OptimizerSpec;
using strata::ps::Server;
using strata::ps::ShardCall;
using strata::ps::SyncSpec;
using strata::ps::UpdateRule;

// The servers of a cluster, each serving on a thread of its own until the test ends.
struct Servers {
  explicit Servers(const strata::cluster::ClusterSpec& spec,
                   strata::ps::ServerOptions options = {}) {
    const auto n = static_cast<int>(spec.num_tasks(strata::cluster::TaskType::ps));
    for (int i = 0; i < n; ++i) {
      servers.push_back(std::make_unique<Server>(spec, i, options));
      Server* server = servers.back().get();
      results.push_back(std::async(std::launch::async, [server] { return server->serve(); }));
    }
  }
  ~Servers() {
    for (auto& server : servers)
      server->stop();
    for (auto& result : results)
      if (result.valid()) result.wait();
  }
  // Stops server `i` and returns what it did.
  strata::ps::ServerReport stop(std::size_t i) {
    servers[i]->stop();
    return results[i].get();
  }
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::future<strata::ps::ServerReport>> results;
};

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& values) {
  return std::as_bytes(std::span(values));
}
template <class T>
std::span<std::byte> bytes_of(std::vector<T>& values) {
  return std::as_writable_bytes(std::span(values));
}

OptimizerSpec sgd(double learning_rate) {
  return {OptimizerSpec::Kind::sgd, learning_rate, 0, 0, 0, 0};
}

// One push_pull of `gradient` with `spec` to shard `handle` on `server`, meeting the shard as
// `sync` says; returns the values.
template <class T>
std::vector<T> push_pull(Client& client, int server, std::uint32_t handle,
                         const OptimizerSpec& spec, const std::vector<T>& gradient, int lane = 0,
                         const strata::ps::SyncSpec& sync = {}) {
  const auto prefix = strata::ps::push_prefix(spec, sync);
  std::vector<T> result(gradient.size());
  ShardCall call;
  call.server = server;
  call.handle = handle;
  call.operation = Operation::push_pull;
  call.type = strata::data_type_of<T>;
  call.count = gradient.size();
  call.prefix = prefix;
  call.values = bytes_of(gradient);
  call.result = bytes_of(result);
  client.call(lane, std::span(&call, 1));
  return result;
}

template <class T>
std::vector<T> pull(Client& client, int server, std::uint32_t handle, std::size_t count) {
  std::vector<T> result(count);
  ShardCall call;
  call.server = server;
  call.handle = handle;
  call.operation = Operation::pull;
  call.type = strata::data_type_of<T>;
  call.count = count;
  call.result = bytes_of(result);
  client.call(0, std::span(&call, 1));
  return result;
}

template <class T>
std::uint32_t create(Client& client, int server, const std::string& name,
                     const std::vector<T>& initial, UpdateRule rule = UpdateRule::optimizer) {
  std::vector<T> current(initial.size());
  return client
      .create(server, name, strata::data_type_of<T>, rule, bytes_of(initial), bytes_of(current))
      .handle;
}

}  // namespace

TEST_CASE("a pushed gradient is applied by the server's optimizer, as on the host") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 2);
  Servers servers(spec);
  Client client(spec, 0, 2);
  CHECK(client.num_servers() == 2);

  SUBCASE("SGD and Adam over float and double, on two servers and two lanes") {
    const std::vector<float> initial{1.0f, -2.0f, 0.5f, 3.0f, 7.0f};
    const std::vector<float> gradient{0.25f, -1.0f, 2.0f, 0.0f, 1e-3f};
    const auto w = create(client, 0, "w", initial);
    const auto got = push_pull(client, 0, w, sgd(0.1), gradient, 1);
    std::vector<float> expected = initial;
    auto state = strata::optim::make_state<float>(strata::optim::Sgd{0.1}, expected.size());
    strata::optim::Sgd{0.1}.apply(std::span(expected), std::span<const float>(gradient), state);
    CHECK(got == expected);
    CHECK(pull<float>(client, 0, w, initial.size()) == expected);

    const std::vector<double> v0{0.1, 0.2, 0.3};
    const std::vector<double> g{1.0, -0.5, 0.25};
    const auto v = create(client, 1, "v", v0);
    strata::optim::Adam adam{.learning_rate = 0.01};
    const OptimizerSpec adam_spec{
        OptimizerSpec::Kind::adam, 0.01, 0, adam.beta1, adam.beta2, adam.epsilon};
    std::vector<double> reference = v0;
    auto adam_state = strata::optim::make_state<double>(adam, reference.size());
    for (int step = 0; step < 3; ++step) {
      const auto after = push_pull(client, 1, v, adam_spec, g, step % 2);
      adam.apply(std::span(reference), std::span<const double>(g), adam_state);
      CHECK(after == reference);
    }
  }

  SUBCASE("a sum shard adds every push") {
    const std::vector<float> initial{1.0f, 2.0f};
    const auto s = create(client, 1, "sum", initial, UpdateRule::sum);
    push_pull(client, 1, s, OptimizerSpec{}, std::vector<float>{0.5f, -1.0f});
    CHECK(push_pull(client, 1, s, OptimizerSpec{}, std::vector<float>{0.5f, -1.0f}) ==
          std::vector<float>{2.0f, 0.0f});
  }

  SUBCASE("a sum shard's push_pull returns the values after its push, at every block boundary") {
    // The server adds a sum push and copies the reply in blocks of 16384 floats (8192 doubles).
    for (const std::size_t count : {std::size_t{1}, std::size_t{8191}, std::size_t{16384},
                                    std::size_t{16385}, std::size_t{3 * 16384 + 5}}) {
      CAPTURE(count);
      std::vector<float> reference(count), g1(count), g2(count);
      std::vector<double> reference64(count), h(count);
      for (std::size_t i = 0; i < count; ++i) {
        reference[i] = static_cast<float>(i % 97) * 0.25f - 3.0f;
        g1[i] = static_cast<float>((i * 7) % 13) * 0.125f;
        g2[i] = -static_cast<float>(i % 5) * 1.5f;
        reference64[i] = static_cast<double>(i) * 1e-3;
        h[i] = 1.0 / static_cast<double>(i + 1);
      }
      const auto s = create(client, 0, fmt::format("sum/{}", count), reference, UpdateRule::sum);
      const auto d =
          create(client, 1, fmt::format("sum64/{}", count), reference64, UpdateRule::sum);
      for (const auto* g : {&g1, &g2, &g1}) {
        const int lane = g == &g2 ? 1 : 0;
        for (std::size_t i = 0; i < count; ++i)
          reference[i] += (*g)[i];
        CHECK(push_pull(client, 0, s, OptimizerSpec{}, *g, lane) == reference);
        CHECK(pull<float>(client, 0, s, count) == reference);
      }
      for (std::size_t i = 0; i < count; ++i)
        reference64[i] += h[i];
      CHECK(push_pull(client, 1, d, OptimizerSpec{}, h) == reference64);
      CHECK(pull<double>(client, 1, d, count) == reference64);
    }
  }

  SUBCASE("the second create of a name returns the first one's values") {
    const std::vector<float> first{1.0f, 2.0f, 3.0f};
    const auto handle = create(client, 0, "shared", first);
    push_pull(client, 0, handle, sgd(1.0), std::vector<float>{1.0f, 1.0f, 1.0f});
    Client other(spec, 0, 1);
    std::vector<float> again{9.0f, 9.0f, 9.0f};
    std::vector<float> current(3);
    const auto created = other.create(0, "shared", strata::DataType::float32, UpdateRule::optimizer,
                                      bytes_of(again), bytes_of(current));
    CHECK(created.existed);
    CHECK(created.handle == handle);
    CHECK(current == std::vector<float>{0.0f, 1.0f, 2.0f});
  }
}

TEST_CASE("bad requests get typed errors, and the server serves on") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  Servers servers(spec);
  Client client(spec, 1, 1);
  const std::vector<float> initial(8, 1.0f);
  const auto w = create(client, 0, "w", initial);

  CHECK_THROWS_AS(pull<float>(client, 0, w + 7, 8), strata::UsageError);
  CHECK_THROWS_WITH(pull<float>(client, 0, w + 7, 8),
                    doctest::Contains("holds no variable with handle"));
  CHECK_THROWS_AS(push_pull(client, 0, w, sgd(0.1), std::vector<float>(7, 1.0f)),
                  strata::MismatchError);
  CHECK_THROWS_AS(push_pull(client, 0, w, sgd(0.1), std::vector<double>(8, 1.0)),
                  strata::MismatchError);
  CHECK_THROWS_AS(create(client, 0, "w", std::vector<float>(9, 0.0f)), strata::MismatchError);
  CHECK_THROWS_WITH(push_pull(client, 0, w, OptimizerSpec{}, std::vector<float>(8, 1.0f)),
                    doctest::Contains("names none"));
  CHECK_THROWS_WITH(push_pull(client, 0, w, sgd(-1.0), std::vector<float>(8, 1.0f)),
                    doctest::Contains("learning_rate"));
  // After all of that, the same connection still works.
  CHECK(push_pull(client, 0, w, sgd(0.5), std::vector<float>(8, 1.0f)) ==
        std::vector<float>(8, 0.5f));
}

TEST_CASE("connections that are not this cluster's workers are refused") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 1);

  SUBCASE("another cluster") {
    Servers servers(spec);
    auto other = strata::testing::loopback_ps_cluster(1, 1);
    strata::cluster::ClusterSpec mixed;
    mixed.add({strata::cluster::TaskType::worker, 0},
              other.address({strata::cluster::TaskType::worker, 0}));
    mixed.add({strata::cluster::TaskType::ps, 0}, spec.address({strata::cluster::TaskType::ps, 0}));
    mixed.add({strata::cluster::TaskType::ps, 1},
              other.address({strata::cluster::TaskType::ps, 0}));
    CHECK_THROWS_AS(Client(mixed, 0, 1, {.timeout = 2s}), strata::ConfigurationError);
  }
  SUBCASE("another token") {
    Servers servers(spec, {.cluster_token = "right"});
    CHECK_THROWS_WITH_AS(Client(spec, 0, 1, {.cluster_token = "wrong", .timeout = 2s}),
                         doctest::Contains("tokens"), strata::ConfigurationError);
    CHECK_THROWS_AS(Client(spec, 0, 1, {.timeout = 2s}), strata::ConfigurationError);
    Client client(spec, 0, 1, {.cluster_token = "right"});
    CHECK(create(client, 0, "w", std::vector<float>{1.0f}) == 0);
  }
  SUBCASE("garbage on the port does not disturb the workers") {
    Servers servers(spec);
    Client client(spec, 0, 1);
    const auto w = create(client, 0, "w", std::vector<float>{1.0f, 2.0f});
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    const auto& address = spec.address({strata::cluster::TaskType::ps, 0});
    socket.connect({asio::ip::make_address(address.host), address.port});
    std::array<char, 100> junk{};
    junk.fill('x');
    asio::write(socket, asio::buffer(junk));
    std::array<char, 1> answer{};
    std::error_code ec;
    asio::read(socket, asio::buffer(answer), ec);
    CHECK(ec);  // dropped without an answer
    CHECK(pull<float>(client, 0, w, 2) == std::vector<float>{1.0f, 2.0f});
  }
}

TEST_CASE("the servers return once every worker has finished") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 2);
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::future<strata::ps::ServerReport>> reports;
  for (int i = 0; i < 2; ++i) {
    servers.push_back(std::make_unique<Server>(spec, i));
    reports.push_back(
        std::async(std::launch::async, [s = servers.back().get()] { return s->serve(); }));
  }
  {
    Client first(spec, 0, 1);
    create(first, 0, "a", std::vector<float>(4, 1.0f));
    create(first, 1, "b", std::vector<double>(2, 1.0));
    first.done();
  }
  CHECK(reports[0].wait_for(200ms) == std::future_status::timeout);
  Client second(spec, 1, 1);
  second.done();
  REQUIRE(reports[0].wait_for(10s) == std::future_status::ready);
  REQUIRE(reports[1].wait_for(10s) == std::future_status::ready);
  const auto report = reports[0].get();
  CHECK(report.shards == 1);
  CHECK(report.shard_bytes == 16);
  CHECK(reports[1].get().shard_bytes == 16);
}

TEST_CASE("a server that goes away is a PeerFailureError naming it") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 1);
  auto server = std::make_unique<Server>(spec, 0);
  auto served = std::async(std::launch::async, [s = server.get()] { return s->serve(); });
  Client client(spec, 0, 1);
  const auto w = create(client, 0, "w", std::vector<float>{1.0f});
  server->stop();
  served.wait();
  server.reset();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(pull<float>(client, 0, w, 1), doctest::Contains("ps task 0"),
                       strata::PeerFailureError);
  CHECK(std::chrono::steady_clock::now() - start < 1s);
}

namespace {

SyncSpec sync_spec(SyncSpec::Mode mode, std::uint32_t replica, std::uint32_t replicas,
                   std::uint32_t bound, std::uint64_t step = 0) {
  SyncSpec spec;
  spec.mode = mode;
  spec.replica = replica;
  spec.replicas = replicas;
  spec.bound = bound;
  spec.step = step;
  return spec;
}

}  // namespace

TEST_CASE(
    "a synchronous step waits for its gradients, adds them in replica order, drops late ones") {
  const auto spec = strata::testing::loopback_ps_cluster(3, 1);
  Servers servers(spec);
  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < 3; ++r)
    clients.push_back(std::make_unique<Client>(spec, r, 1));
  const auto w = create(*clients[0], 0, "w", std::vector<float>{0.0f, 0.0f});
  using Mode = SyncSpec::Mode;
  // Three replicas, two gradients to aggregate: the third is a backup.
  auto push = [&](int replica, std::uint64_t step, std::vector<float> gradient) {
    return std::async(std::launch::async, [&, replica, step, gradient] {
      return push_pull(
          *clients[static_cast<std::size_t>(replica)], 0, w, sgd(1.0), gradient, 0,
          sync_spec(Mode::synchronous, static_cast<std::uint32_t>(replica), 3, 2, step));
    });
  };
  auto second = push(1, 0, {0.25f, 3.0f});
  CHECK(second.wait_for(200ms) == std::future_status::timeout);  // one of two is in
  auto first = push(0, 0, {1.0f, -1.0f});
  const std::vector<float> after{-1.25f, -2.0f};  // 0 - (1 + 0.25), 0 - (-1 + 3)
  CHECK(first.get() == after);
  CHECK(second.get() == after);
  // The backup's gradient of step 0 comes late: dropped, and it gets the values of step 1.
  CHECK(push(2, 0, {100.0f, 100.0f}).get() == after);
  CHECK(pull<float>(*clients[0], 0, w, 2) == after);
  // Replicas that disagree on the policy, push twice or push a future step are refused.
  CHECK_THROWS_WITH(push_pull(*clients[0], 0, w, sgd(1.0), std::vector<float>{1, 1}, 0,
                              sync_spec(Mode::synchronous, 0, 3, 3, 1)),
                    doctest::Contains("disagree"));
  CHECK_THROWS_WITH(push_pull(*clients[0], 0, w, sgd(1.0), std::vector<float>{1, 1}, 0,
                              sync_spec(Mode::synchronous, 0, 3, 2, 5)),
                    doctest::Contains("for step 5"));
  auto waiting = push(0, 1, {1.0f, 1.0f});
  CHECK(waiting.wait_for(100ms) == std::future_status::timeout);
  Client other(spec, 0, 1);  // clients[0]'s lane is busy waiting
  CHECK_THROWS_WITH(push_pull(other, 0, w, sgd(1.0), std::vector<float>{1, 1}, 0,
                              sync_spec(Mode::synchronous, 0, 3, 2, 1)),
                    doctest::Contains("pushed twice"));
  CHECK(push(2, 1, {1.0f, 1.0f}).get() == std::vector<float>{-3.25f, -4.0f});
  CHECK(waiting.get() == std::vector<float>{-3.25f, -4.0f});
}

TEST_CASE("under bounded staleness a replica waits while it is more than k pushes ahead") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  Servers servers(spec);
  Client fast(spec, 0, 1);
  Client slow(spec, 1, 1);
  const auto w = create(fast, 0, "w", std::vector<float>{0.0f});
  using Mode = SyncSpec::Mode;
  auto step = [&](Client& client, std::uint32_t replica) {
    return push_pull(client, 0, w, sgd(1.0), std::vector<float>{-1.0f}, 0,
                     sync_spec(Mode::bounded_staleness, replica, 2, 1));
  };
  // k = 1: the fast replica may be one push ahead of the slow one, not two.
  CHECK(step(fast, 0) == std::vector<float>{1.0f});
  auto second = std::async(std::launch::async, [&] { return step(fast, 0); });
  CHECK(second.wait_for(200ms) == std::future_status::timeout);
  CHECK(step(slow, 1) == std::vector<float>{3.0f});  // applied at once, like every push
  // Its push was applied at once too; its reply, held, brings the values of when it goes.
  CHECK(second.get() == std::vector<float>{3.0f});
  // A worker that has finished holds nobody back.
  auto third = std::async(std::launch::async, [&] { return step(fast, 0); });
  CHECK(third.wait_for(200ms) == std::future_status::timeout);
  slow.done();
  CHECK(third.get() == std::vector<float>{4.0f});
}

TEST_CASE(
    "a push held past the server's hold is a TimeoutError naming the replicas it waited for") {
  // A stopped worker keeps its connections open and pushes nothing: the others' pushes wait. The
  // server answers them a little before the timeout (1 s here: 900 ms), naming who held them,
  // so the workers' errors point at the stopped worker and not at the ps task.
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  strata::ps::ServerOptions options;
  options.timeout = 1s;
  Servers servers(spec, options);
  strata::ps::ClientOptions patient;
  patient.timeout = 10s;
  Client first(spec, 0, 1, patient);
  Client second(spec, 1, 1, patient);
  using Mode = SyncSpec::Mode;
  const auto held = [](Client& client, std::uint32_t handle, const SyncSpec& sync) {
    const auto start = std::chrono::steady_clock::now();
    std::string what;
    try {
      push_pull(client, 0, handle, sgd(1.0), std::vector<float>{1.0f}, 0, sync);
    } catch (const strata::TimeoutError& error) {
      what = error.what();
    }
    return std::pair(what, std::chrono::steady_clock::now() - start);
  };

  SUBCASE("synchronous: the replica that never pushed, then the worker that stopped pushing") {
    const auto w = create(first, 0, "w", std::vector<float>{0.0f});
    const auto [never, waited] = held(first, w, sync_spec(Mode::synchronous, 0, 2, 2, 0));
    CHECK(never.find("replica 1 (no push from it yet)") != std::string::npos);
    CHECK(never.find("variable 'w'") != std::string::npos);
    CHECK(never.find("ps task 0 (127.0.0.1") != std::string::npos);
    CHECK(waited >= 850ms);
    CHECK(waited < 5s);
    // Replica 0's gradient stays in step 0, which completes (summed) once replica 1's comes;
    // then worker 1 stops pushing.
    CHECK(push_pull(second, 0, w, sgd(1.0), std::vector<float>{1.0f}, 0,
                    sync_spec(Mode::synchronous, 1, 2, 2, 0)) == std::vector<float>{-2.0f});
    const auto [stopped, _] = held(first, w, sync_spec(Mode::synchronous, 0, 2, 2, 1));
    CHECK(stopped.find("replica 1 (worker 1) to push step 1") != std::string::npos);
    // The server serves on: the variable is whole.
    CHECK(pull<float>(first, 0, w, 1) == std::vector<float>{-2.0f});
  }

  SUBCASE("bounded staleness: the replica the pusher ran ahead of") {
    const auto v = create(first, 0, "v", std::vector<float>{0.0f});
    const auto lockstep = [](std::uint32_t replica) {
      return sync_spec(Mode::bounded_staleness, replica, 2, 0);
    };
    // k = 0: each replica's push waits until the other has pushed as often.
    auto other = std::async(std::launch::async, [&] {
      return push_pull(second, 0, v, sgd(1.0), std::vector<float>{1.0f}, 0, lockstep(1));
    });
    CHECK(push_pull(first, 0, v, sgd(1.0), std::vector<float>{1.0f}, 0, lockstep(0)) ==
          std::vector<float>{-2.0f});
    CHECK(other.get() == std::vector<float>{-2.0f});
    const auto [ahead, waited] = held(first, v, lockstep(0));
    CHECK(ahead.find("replica 1 (worker 1) to come within 0 steps") != std::string::npos);
    CHECK(waited >= 850ms);
    CHECK(waited < 5s);
  }
}

TEST_CASE("a worker that goes away while its push waits ends its session with it") {
  // Rank 0's synchronous push waits for rank 1's; rank 0 gives up and closes its connection.
  // The server notices at once (a waiting client sends nothing), so once rank 1 has finished it
  // has no worker connected and returns at its timeout, naming rank 0, instead of serving a
  // dead connection for ever.
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  Server server(spec, 0, strata::ps::ServerOptions{.timeout = 500ms});
  auto served = std::async(std::launch::async, [&] { return server.serve(); });
  {
    Client gone(spec, 0, 1, strata::ps::ClientOptions{.timeout = 300ms});
    const auto w = create(gone, 0, "w", std::vector<float>{0.0f});
    CHECK_THROWS_AS(push_pull(gone, 0, w, sgd(1.0), std::vector<float>{1.0f}, 0,
                              sync_spec(SyncSpec::Mode::synchronous, 0, 2, 2, 0)),
                    strata::TimeoutError);
  }
  Client(spec, 1, 1).done();
  REQUIRE(served.wait_for(10s) == std::future_status::ready);
  CHECK_THROWS_WITH(served.get(), doctest::Contains("rank(s) 0 of the collective group"));
}

namespace {

// A state call (pull_state or assign_state) to shard `handle` of `count` floats on server 0.
ShardCall state_call(Operation operation, std::uint32_t handle, std::size_t count) {
  ShardCall call;
  call.handle = handle;
  call.operation = operation;
  call.type = strata::DataType::float32;
  call.count = count;
  return call;
}

// The shard's optimizer state: its spec and slots.
std::pair<strata::ps::StateSpec, std::vector<float>> pull_state(Client& client,
                                                                std::uint32_t handle,
                                                                std::size_t count) {
  std::vector<std::byte> reply(strata::ps::kStateSpecBytes +
                               strata::ps::kMaxSlotsPerElement * count * sizeof(float));
  ShardCall call = state_call(Operation::pull_state, handle, count);
  call.result = reply;
  client.call(0, std::span(&call, 1));
  const auto spec = strata::ps::decode_state(reply);
  REQUIRE(spec.has_value());
  REQUIRE(call.received == strata::ps::kStateSpecBytes + spec->slots_per_element * count * 4);
  std::vector<float> slots(spec->slots_per_element * count);
  if (!slots.empty())
    std::memcpy(slots.data(), reply.data() + strata::ps::kStateSpecBytes, slots.size() * 4);
  return {*spec, slots};
}

void assign_state(Client& client, std::uint32_t handle, std::size_t count,
                  const strata::ps::StateSpec& spec, const std::vector<float>& slots) {
  const auto prefix = strata::ps::encode(spec);
  ShardCall call = state_call(Operation::assign_state, handle, count);
  call.prefix = prefix;
  call.values = bytes_of(slots);
  client.call(0, std::span(&call, 1));
}

}  // namespace

TEST_CASE("a shard's optimizer state is read and set whole, and updates continue from it") {
  const auto spec = strata::testing::loopback_ps_cluster(1, 1);
  Servers servers(spec);
  Client client(spec, 0, 1);
  constexpr std::size_t kCount = 13;
  const std::vector<float> initial(kCount, 0.5f);
  const strata::optim::Adam adam{0.01f};
  const auto adam_spec = strata::ps::spec_of(adam);
  std::vector<float> gradient(kCount);
  for (std::size_t i = 0; i < kCount; ++i)
    gradient[i] = static_cast<float>(i) - 6.0f;

  const auto a = create(client, 0, "a", initial);
  // Before any update there is no state.
  CHECK(pull_state(client, a, kCount).first == strata::ps::StateSpec{});
  for (int step = 0; step < 3; ++step)
    push_pull(client, 0, a, adam_spec, gradient);
  const auto [saved, slots] = pull_state(client, a, kCount);
  CHECK(saved == strata::ps::StateSpec{true, 2, 3});

  // The state taken to another shard with the same values: both continue identically, and as
  // Adam on the host does from the same state.
  const auto values = pull<float>(client, 0, a, kCount);
  const auto b = create(client, 0, "b", values);
  assign_state(client, b, kCount, saved, slots);
  CHECK(pull_state(client, b, kCount) == std::pair(saved, slots));
  std::vector<float> host = values;
  strata::optim::OptimizerState<float> host_state{slots, 3};
  adam.apply(std::span(host), std::span<const float>(gradient), host_state);
  CHECK(push_pull(client, 0, a, adam_spec, gradient) == host);
  CHECK(push_pull(client, 0, b, adam_spec, gradient) == host);

  // Clearing it makes the next update start from a fresh state.
  assign_state(client, b, kCount, {}, {});
  CHECK(pull_state(client, b, kCount).first == strata::ps::StateSpec{});

  SUBCASE("a state of another slot count is refused by the next push of the optimizer") {
    assign_state(client, b, kCount, {true, 1, 4}, std::vector<float>(kCount, 0.0f));
    CHECK_THROWS_WITH_AS(push_pull(client, 0, b, adam_spec, gradient),
                         doctest::Contains("1 slots per element"), strata::UsageError);
  }
  SUBCASE("bad states are refused, and the shard keeps its own") {
    const auto before = pull_state(client, a, kCount);
    // Slots that do not match the spec's count.
    CHECK_THROWS_AS(assign_state(client, a, kCount, {true, 2, 4}, std::vector<float>(kCount)),
                    strata::UsageError);
    CHECK_THROWS_AS(assign_state(client, a, kCount, {true, 1, 4}, std::vector<float>(2 * kCount)),
                    strata::UsageError);
    // A malformed spec: more slots than any optimizer keeps, padding set.
    auto too_many = strata::ps::encode(strata::ps::StateSpec{true, 2, 4});
    too_many[4] = std::byte{3};
    ShardCall call = state_call(Operation::assign_state, a, kCount);
    call.prefix = too_many;
    const std::vector<float> two(2 * kCount);
    call.values = bytes_of(two);
    CHECK_THROWS_WITH(client.call(0, std::span(&call, 1)), doctest::Contains("malformed"));
    // More bytes than any state of the shard's holds.
    const std::vector<float> three(3 * kCount);
    call.values = bytes_of(three);
    CHECK_THROWS_AS(client.call(0, std::span(&call, 1)), strata::MismatchError);
    // A sum shard keeps no optimizer state.
    const auto summed = create(client, 0, "summed", initial, UpdateRule::sum);
    CHECK_THROWS_WITH(assign_state(client, summed, kCount, {true, 1, 1}, initial),
                      doctest::Contains("UpdateRule::sum"));
    CHECK(pull_state(client, a, kCount) == before);
  }
  CHECK(strata::ps::decode_state(strata::ps::encode(strata::ps::StateSpec{true, 2, 7})) ==
        strata::ps::StateSpec{true, 2, 7});
  auto negative = strata::ps::encode(strata::ps::StateSpec{true, 2, 7});
  negative[15] = std::byte{0x80};
  CHECK_FALSE(strata::ps::decode_state(negative).has_value());
  const auto largest = std::numeric_limits<std::int64_t>::max();
  CHECK_FALSE(strata::ps::decode_state(strata::ps::encode(strata::ps::StateSpec{true, 2, largest}))
                  .has_value());
  CHECK(strata::ps::decode_state(strata::ps::encode(strata::ps::StateSpec{true, 2, largest - 1}))
            .has_value());
  CHECK_FALSE(
      strata::ps::decode_state(strata::ps::encode(strata::ps::StateSpec{false, 0, 3})).has_value());
}

TEST_CASE("attach specs round-trip, and out-of-range ones are refused") {
  strata::ps::AttachSpec collect;
  collect.phase = strata::ps::AttachSpec::Phase::collect;
  collect.bytes = 1 << 20;
  collect.host.fill(std::byte{7});
  collect.ticket.fill(std::byte{9});
  CHECK(strata::ps::decode_attach(strata::ps::encode(collect)) == collect);
  strata::ps::AttachSpec probe;
  probe.host.fill(std::byte{7});
  CHECK(strata::ps::decode_attach(strata::ps::encode(probe)) == probe);
  const auto probe_bytes = strata::ps::encode(probe);
  CHECK_FALSE(strata::ps::decode_attach(std::span(probe_bytes).first(119)).has_value());
  for (const std::uint64_t bytes : {std::uint64_t{0}, strata::ps::kMaxRegionBytes + 1}) {
    auto bad = collect;
    bad.bytes = bytes;
    CHECK_FALSE(strata::ps::decode_attach(strata::ps::encode(bad)).has_value());
  }
  auto named_probe = probe;
  named_probe.ticket[0] = std::byte{1};
  CHECK_FALSE(strata::ps::decode_attach(strata::ps::encode(named_probe)).has_value());
  auto padded = strata::ps::encode(collect);
  padded[3] = std::byte{1};
  CHECK_FALSE(strata::ps::decode_attach(padded).has_value());
  auto phase = strata::ps::encode(collect);
  phase[0] = std::byte{2};
  CHECK_FALSE(strata::ps::decode_attach(phase).has_value());
}

// ---- a worker on the server's host: values through a shared region ---------------------------

namespace {

template <class T>
std::vector<T> pattern(std::size_t count, T scale, std::size_t period) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = static_cast<T>(static_cast<double>(i % period) * static_cast<double>(scale)) -
                static_cast<T>(1);
  return values;
}

template <class T>
void assign(Client& client, int server, std::uint32_t handle, const std::vector<T>& values) {
  ShardCall call;
  call.server = server;
  call.handle = handle;
  call.operation = Operation::assign;
  call.type = strata::data_type_of<T>;
  call.count = values.size();
  call.values = bytes_of(values);
  client.call(0, std::span(&call, 1));
}

}  // namespace

TEST_CASE("a worker on the server's host moves large values through a shared region") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  Servers servers(spec);
  Client shared(spec, 0, 1);
  Client tcp(spec, 1, 1, {.shared_memory = false});
  std::uint64_t region_bytes = 0;  // what the server must report

  // 1.2 MB of floats: through the region for `shared`, over TCP for `tcp`.
  const std::size_t n = 300007;
  const auto initial = pattern<float>(n, 0.5f, 1013);
  const auto gradient = pattern<float>(n, -0.25f, 89);
  const std::uint64_t bytes = n * sizeof(float);

  SUBCASE("sum, SGD, Adam, pull and assign give what TCP gives, bit for bit") {
    const auto sum = create(shared, 0, "sum", initial, UpdateRule::sum);
    std::vector<float> reference = initial;
    for (std::size_t i = 0; i < n; ++i)
      reference[i] += gradient[i];
    CHECK(push_pull(shared, 0, sum, OptimizerSpec{}, gradient) == reference);
    region_bytes += 2 * bytes;  // the gradient read, the new values left in its place
    for (std::size_t i = 0; i < n; ++i)
      reference[i] += gradient[i];
    CHECK(push_pull(tcp, 0, sum, OptimizerSpec{}, gradient) == reference);
    CHECK(pull<float>(shared, 0, sum, n) == reference);
    region_bytes += bytes;
    CHECK(pull<float>(tcp, 0, sum, n) == reference);

    // The same updates on twin shards, one through the region, one over TCP.
    const strata::optim::Adam adam{.learning_rate = 0.01};
    const OptimizerSpec adam_spec{
        OptimizerSpec::Kind::adam, 0.01, 0, adam.beta1, adam.beta2, adam.epsilon};
    for (const OptimizerSpec& optimizer : {sgd(0.125), adam_spec}) {
      const auto name = optimizer.kind == OptimizerSpec::Kind::adam ? "adam" : "sgd";
      const auto in_region = create(shared, 0, fmt::format("{}/region", name), initial);
      const auto on_socket = create(tcp, 0, fmt::format("{}/socket", name), initial);
      for (int step = 0; step < 2; ++step) {
        CHECK(push_pull(shared, 0, in_region, optimizer, gradient) ==
              push_pull(tcp, 0, on_socket, optimizer, gradient));
        region_bytes += 2 * bytes;
      }
    }

    const auto assigned = pattern<float>(n, 3.0f, 7);
    assign(shared, 0, sum, assigned);
    region_bytes += bytes;
    CHECK(pull<float>(tcp, 0, sum, n) == assigned);

    // A push (no reply values) through the region; doubles too.
    const auto h = pattern<double>(n, 1e-3, 1000);
    const auto d = create(shared, 0, "sum64", std::vector<double>(n, 0.0), UpdateRule::sum);
    push_pull(shared, 0, d, OptimizerSpec{}, h);
    region_bytes += 2 * n * sizeof(double);
    CHECK(pull<double>(tcp, 0, d, n) == h);
  }

  SUBCASE("the region grows with the calls, and small calls stay on the socket") {
    for (const std::size_t count : {n, std::size_t{(1 << 20) + 3}, std::size_t{16383}}) {
      CAPTURE(count);
      const auto start = pattern<float>(count, 0.5f, 1013);
      const auto g = pattern<float>(count, 2.0f, 31);
      const auto s = create(shared, 0, fmt::format("grow/{}", count), start, UpdateRule::sum);
      std::vector<float> reference = start;
      for (std::size_t i = 0; i < count; ++i)
        reference[i] += g[i];
      CHECK(push_pull(shared, 0, s, OptimizerSpec{}, g) == reference);
      // 16383 floats are under kRegionMinBytes: over TCP.
      if (count * sizeof(float) >= strata::ps::kRegionMinBytes) region_bytes += 2 * count * 4;
    }
  }

  SUBCASE("a client with shared memory turned off moves nothing through a region") {
    const auto s = create(tcp, 0, "sum", initial, UpdateRule::sum);
    push_pull(tcp, 0, s, OptimizerSpec{}, gradient);
    CHECK(pull<float>(tcp, 0, s, n).size() == n);
  }

  shared.done();
  tcp.done();
  CHECK(servers.stop(0).region_bytes == region_bytes);
}

namespace {

using strata::transport::tcp::FrameFlag;
using strata::transport::tcp::FrameHeader;
using strata::transport::tcp::ServiceIo;

// A worker's raw connection to ps task 0, for requests the Client never sends.
struct RawWorker {
  RawWorker(const strata::cluster::ClusterSpec& spec, int rank) {
    const strata::transport::tcp::ServiceIdentity mine{
        strata::ps::ps_fingerprint(spec), strata::ps::kTunables, spec.collective_size(), rank, {}};
    std::string why;
    link = strata::transport::tcp::ServiceConnection::connect(
        spec.address({strata::cluster::TaskType::ps, 0}), mine, 0, 0, 42, until(), "test",
        "ps task 0", why);
    REQUIRE_MESSAGE(link, why);
  }

  static strata::Clock::time_point until() { return strata::Clock::now() + 10s; }

  // Sends `payload` as a request whose header claims `claimed` bytes (0: the payload's size).
  void send(FrameHeader header, std::span<const std::byte> payload, std::uint32_t claimed = 0) {
    header.type = strata::transport::tcp::FrameType::request;
    header.sequence = ++sequence;
    header.payload_bytes = claimed != 0 ? claimed : static_cast<std::uint32_t>(payload.size());
    const std::array<std::span<const std::byte>, 1> parts{payload};
    REQUIRE(link->send(header, parts, until()) == ServiceIo::done);
  }

  // The reply's header and its text (an error's reason), or nothing of a values reply.
  std::pair<FrameHeader, std::string> reply() {
    strata::transport::tcp::FrameBytes bytes{};
    REQUIRE(link->receive(bytes, until()) == ServiceIo::done);
    FrameHeader header;
    REQUIRE(!strata::transport::tcp::decode(bytes, header, 1u << 30));
    std::string text(header.payload_bytes, '\0');
    if (!text.empty())
      REQUIRE(link->receive(std::as_writable_bytes(std::span(text)), until()) == ServiceIo::done);
    return {header, text};
  }

  std::pair<FrameHeader, std::string> attach(const strata::ps::AttachSpec& spec) {
    FrameHeader header;
    header.kind = static_cast<strata::Collective>(Operation::attach_region);
    send(header, encode(spec));
    return reply();
  }

  std::unique_ptr<strata::transport::tcp::ServiceConnection> link;
  std::uint64_t sequence = 0;
};

strata::ps::AttachSpec collect_spec(const strata::transport::shm::HandoverServer& handover,
                                    std::uint64_t bytes) {
  strata::ps::AttachSpec spec;
  spec.phase = strata::ps::AttachSpec::Phase::collect;
  spec.bytes = bytes;
  spec.host = strata::transport::shm::this_host().bytes;
  const auto& ticket = handover.ticket();
  std::copy(ticket.name.begin(), ticket.name.end(), spec.ticket.begin());
  std::copy(ticket.secret.begin(), ticket.secret.end(),
            spec.ticket.begin() + static_cast<std::ptrdiff_t>(ticket.name.size()));
  return spec;
}

// An attach_region collect of `fd`, served while the server collects it; the reply.
std::pair<FrameHeader, std::string> offer(RawWorker& worker, int fd, std::uint64_t bytes) {
  strata::transport::shm::HandoverServer handover(0);
  FrameHeader header;
  header.kind = static_cast<strata::Collective>(Operation::attach_region);
  worker.send(header, encode(collect_spec(handover, bytes)));
  handover.serve(fd, 1, strata::Deadline::after(10s));
  return worker.reply();
}

constexpr auto kBadRequest = static_cast<std::int32_t>(strata::ps::Status::bad_request);

// A create of `elements` float32 values named `name` (1 to 8 bytes) by hand: its header claims
// `claimed` bytes of values after the spec and the name, and `sent` of them (zeros) follow.
void send_create(RawWorker& raw, std::string_view name, std::uint64_t elements,
                 std::uint64_t claimed, std::size_t sent) {
  strata::ps::CreateSpec spec;
  spec.elements = elements;
  spec.update = UpdateRule::sum;
  spec.name_bytes = static_cast<std::uint32_t>(name.size());
  std::vector<std::byte> payload(strata::ps::kCreateSpecBytes + 8 + sent, std::byte{0});
  const auto encoded = strata::ps::encode(spec);
  std::copy(encoded.begin(), encoded.end(), payload.begin());
  std::memcpy(payload.data() + strata::ps::kCreateSpecBytes, name.data(), name.size());
  FrameHeader header;
  header.kind = static_cast<strata::Collective>(Operation::create);
  header.element_type = strata::DataType::float32;
  header.count = elements;
  raw.send(header, payload, static_cast<std::uint32_t>(strata::ps::kCreateSpecBytes + 8 + claimed));
}

}  // namespace

TEST_CASE("shared regions: hostile requests get typed errors, and the server serves on") {
  const auto spec = strata::testing::loopback_ps_cluster(2, 1);
  Servers servers(spec);
  Client client(spec, 0, 1, {.shared_memory = false});
  const std::size_t n = 1 << 18;  // 1 MiB of floats
  const auto w = create(client, 0, "w", std::vector<float>(n, 1.0f), UpdateRule::sum);
  RawWorker raw(spec, 1);

  // Probes: this host shares, another does not.
  strata::ps::AttachSpec probe;
  probe.host = strata::transport::shm::this_host().bytes;
  CHECK(raw.attach(probe).first.count == 1);
  probe.host[3] ^= std::byte{1};
  CHECK(raw.attach(probe).first.count == 0);

  FrameHeader push;
  push.kind = static_cast<strata::Collective>(Operation::push_pull);
  push.element_type = strata::DataType::float32;
  push.root = static_cast<std::int32_t>(w);
  push.count = n;
  push.flags = static_cast<std::uint8_t>(FrameFlag::in_region);
  const auto prefix = strata::ps::push_prefix(OptimizerSpec{});

  SUBCASE("values in a region the connection never attached") {
    raw.send(push, prefix);
    const auto [reply, text] = raw.reply();
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("attached none") != std::string::npos);
  }
  SUBCASE("a create whose element count would wrap its size is refused, not allocated") {
    // 2^62 floats are 2^64 bytes: the name's 8 bytes alone would match the payload.
    send_create(raw, "h", std::uint64_t{1} << 62, 0, 0);
    const auto [reply, text] = raw.reply();
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("do not add up") != std::string::npos);
    // The server serves on, this connection too.
    raw.send(push, prefix);
    CHECK(raw.reply().second.find("attached none") != std::string::npos);
    CHECK(pull<float>(client, 0, w, n) == std::vector<float>(n, 1.0f));
  }
  SUBCASE("a create that claims a gigabyte of values and sends a few costs no gigabyte") {
    const std::size_t before = strata::testing::resident_bytes();
    send_create(raw, "big", std::uint64_t{1} << 28, std::uint64_t{1} << 30, 64);
    constexpr std::size_t kLimit = std::size_t{128} << 20;
    CHECK(strata::testing::resident_growth(before, kLimit) < kLimit);
    raw.link.reset();
    CHECK(pull<float>(client, 0, w, n) == std::vector<float>(n, 1.0f));
  }
  SUBCASE("a creator that goes away halfway through its values leaves no variable behind") {
    const std::size_t count = 1 << 16;
    send_create(raw, "half", count, count * sizeof(float), count * sizeof(float) / 2);
    // Give the server time to read the spec, the name and half the values, then vanish.
    std::this_thread::sleep_for(200ms);
    raw.link.reset();
    // The next create of the name is the first: its own values, not half zeros.
    const std::vector<float> initial(count, 2.0f);
    std::vector<float> current(count, -1.0f);
    const auto created = client.create(0, "half", strata::DataType::float32, UpdateRule::sum,
                                       bytes_of(initial), bytes_of(current));
    CHECK_FALSE(created.existed);
    CHECK(pull<float>(client, 0, created.handle, count) == initial);
  }
  SUBCASE("a create that claims its values are in a region") {
    FrameHeader create_header = push;
    create_header.kind = static_cast<strata::Collective>(Operation::create);
    raw.send(create_header, {});
    const auto [reply, text] = raw.reply();
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("cannot carry its values in a shared region") != std::string::npos);
  }
  SUBCASE("a region that is not a sealed memfd, or smaller than it claims, is not mapped") {
    const int unsealed = ::memfd_create("test", MFD_CLOEXEC);
    REQUIRE(unsealed >= 0);
    REQUIRE(::ftruncate(unsealed, 1 << 20) == 0);
    auto [reply, text] = offer(raw, unsealed, 1 << 20);
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("could not map") != std::string::npos);
    ::close(unsealed);
    const auto region = strata::transport::shm::Region::create(1 << 20, 1);
    std::tie(reply, text) = offer(raw, region.fd(), 2 << 20);
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("could not map") != std::string::npos);
    // Neither left a region behind.
    raw.send(push, prefix);
    CHECK(raw.reply().second.find("attached none") != std::string::npos);
  }
  SUBCASE("a region offered from another host is refused before it is collected") {
    strata::transport::shm::HandoverServer handover(0);
    auto spec_bytes = collect_spec(handover, 1 << 20);
    spec_bytes.host[0] ^= std::byte{1};
    FrameHeader header;
    header.kind = static_cast<strata::Collective>(Operation::attach_region);
    raw.send(header, encode(spec_bytes));
    const auto [reply, text] = raw.reply();
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("another host") != std::string::npos);
  }
  SUBCASE("values larger than the attached region, then a call that fits") {
    const auto small = strata::transport::shm::Region::create(1 << 19, 1);
    // Not a structured binding: clang 14 cannot name one inside doctest's message lambda.
    const auto offered = offer(raw, small.fd(), 1 << 19);
    const FrameHeader& attached = offered.first;
    REQUIRE_MESSAGE(attached.root == 0, offered.second);
    CHECK(attached.count == 1 << 19);
    raw.send(push, prefix);
    const auto [reply, text] = raw.reply();
    CHECK(reply.root == kBadRequest);
    CHECK(text.find("do not fit") != std::string::npos);

    const auto big = strata::transport::shm::Region::create(n * sizeof(float), 1);
    REQUIRE(offer(raw, big.fd(), n * sizeof(float)).first.root == 0);
    auto* values = reinterpret_cast<float*>(big.data());
    std::fill(values, values + n, 0.5f);
    raw.send(push, prefix);
    const auto [done, nothing] = raw.reply();
    CHECK(done.root == 0);
    CHECK(done.flags == static_cast<std::uint8_t>(FrameFlag::in_region));
    CHECK(done.payload_bytes == 0);
    CHECK(std::all_of(values, values + n, [](float v) { return v == 1.5f; }));
  }
  // Whatever came before, the workers are served on.
  CHECK(pull<float>(client, 0, w, n).size() == n);
}
