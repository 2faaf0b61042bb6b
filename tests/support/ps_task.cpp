// tests/support/ps_task.cpp — a task of a parameter-server cluster, for the multi-process fault
// tests of the parameter servers (tests/ps/process_test.cpp).
//
//   strata_test_ps_task SCENARIO [ARGS...]     (cluster and task from TF_CONFIG)
//
// Scenarios:
//   serve                  this ps task: prints "bound PORT" once it listens, serves
//                          (ps::Server::serve), then prints "served shards S requests R refused F"
//                          and exits 0.
//   pushes STEPS ELEMENTS PAUSE_MS [lockstep REPLICAS]
//                          a worker: creates variable "w<s>" of ELEMENTS float zeros on every ps
//                          task s (or finds it: a restarted worker), prints "created existed E";
//                          then STEPS times (0: until an error) one batch of push_pull to every
//                          shard, gradient -1 under SGD with learning rate 1, so that every push
//                          adds 1 to every element. Every element of every reply must equal its
//                          shard's version (pushes apply whole or not at all). Prints "ready" after
//                          the first step and "step K" after each, pausing PAUSE_MS between
//                          steps; at the end calls ps::Client::done() and prints "ok". With
//                          `lockstep REPLICAS`, the pushes are bounded staleness with k = 0 over
//                          REPLICAS workers (this one replica `rank`): none runs a step ahead.
//   pulls ELEMENTS         a worker: creates the variables as `pushes`, then pulls every shard in
//                          one batch until an error; prints "ready" after the first pull.
//   garbage raw|frames N   N connections to ps task 0 that send 4 KiB of random bytes: `raw`
//                          instead of the handshake, `frames` after a handshake that passes (as
//                          worker rank 0, with STRATA_CLUSTER_TOKEN when set) instead of request
//                          frames. Prints "garbage dropped D of N" (connections the server closed)
//                          and exits 0 when it dropped all of them.
// On an exception it prints "error CLASS CALL_MS AT_NS MESSAGE" (CLASS: PeerFailureError,
// TimeoutError, MismatchError, ConfigurationError, UsageError or other; CALL_MS: how long the
// failing call took; AT_NS: steady_clock's time since its epoch when it failed, which is
// CLOCK_MONOTONIC and so comparable across processes) and exits with
// strata::exit_status_of(error). Values that break the rule above exit 8, bad arguments 2.
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/client.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/server.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/handshake.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using strata::cluster::TaskType;

constexpr int kWrongValues = 8;
constexpr int kBadArguments = 2;

std::string_view class_of(const std::exception& error) {
  if (dynamic_cast<const strata::PeerFailureError*>(&error) != nullptr) return "PeerFailureError";
  if (dynamic_cast<const strata::TimeoutError*>(&error) != nullptr) return "TimeoutError";
  if (dynamic_cast<const strata::MismatchError*>(&error) != nullptr) return "MismatchError";
  if (dynamic_cast<const strata::ConfigurationError*>(&error) != nullptr)
    return "ConfigurationError";
  if (dynamic_cast<const strata::UsageError*>(&error) != nullptr) return "UsageError";
  return "other";
}

void say(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

// ---- ps task ---------------------------------------------------------------------------------

int serve(const strata::cluster::ResolvedCluster& resolved, Clock::time_point& began) {
  began = Clock::now();
  strata::ps::Server server(resolved.cluster, resolved.task.index);
  say(fmt::format("bound {}", server.port()));
  const auto report = server.serve();
  say(fmt::format("served shards {} requests {} refused {}", report.shards, report.requests,
                  report.refused));
  return 0;
}

// ---- workers ---------------------------------------------------------------------------------

struct Shards {
  std::vector<std::uint32_t> handles;
  std::vector<std::vector<float>> values;  // per ps task: the last values seen
};

Shards create_all(strata::ps::Client& client, std::size_t elements, Clock::time_point& began) {
  Shards shards;
  const std::vector<float> initial(elements, 0.0F);
  bool existed = false;
  for (int s = 0; s < client.num_servers(); ++s) {
    std::vector<float> current(elements, -1.0F);
    began = Clock::now();
    const auto created = client.create(
        s, fmt::format("w{}", s), strata::DataType::float32, strata::ps::UpdateRule::optimizer,
        std::as_bytes(std::span(initial)), std::as_writable_bytes(std::span(current)));
    existed = existed || created.existed;
    if (!created.existed) current = initial;  // written only when it existed
    shards.handles.push_back(created.handle);
    shards.values.push_back(std::move(current));
  }
  say(fmt::format("created existed {}", existed ? 1 : 0));
  return shards;
}

// Whether every element of `values` equals `version`; says what differs when not.
bool consistent(const std::vector<float>& values, std::uint64_t version, int server) {
  const auto expected = static_cast<float>(version);
  const auto wrong =
      std::find_if(values.begin(), values.end(), [&](float v) { return v != expected; });
  if (wrong == values.end()) return true;
  say(fmt::format("wrong values: ps task {} element {} is {}, the shard's version is {}", server,
                  wrong - values.begin(), *wrong, version));
  return false;
}

int pushes(std::span<const std::string_view> args, strata::ps::Client& client, int rank,
           Clock::time_point& began) {
  const long steps = std::stol(std::string(args[1]));
  const auto elements = static_cast<std::size_t>(std::stol(std::string(args[2])));
  const auto pause = std::chrono::milliseconds(std::stol(std::string(args[3])));
  Shards shards = create_all(client, elements, began);
  // A restarted worker finds the values the others pushed: whole pushes only.
  for (int s = 0; s < client.num_servers(); ++s) {
    const auto& current = shards.values[static_cast<std::size_t>(s)];
    if (!consistent(current, static_cast<std::uint64_t>(current.front()), s)) return kWrongValues;
  }
  strata::ps::SyncSpec sync;
  if (args.size() == 6) {
    sync.mode = strata::ps::SyncSpec::Mode::bounded_staleness;
    sync.replicas = static_cast<std::uint32_t>(std::stol(std::string(args[5])));
    sync.replica = static_cast<std::uint32_t>(rank);
    sync.bound = 0;
  }
  const auto prefix = strata::ps::push_prefix(
      strata::ps::OptimizerSpec{strata::ps::OptimizerSpec::Kind::sgd, 1.0, 0, 0, 0, 0}, sync);
  const std::vector<float> gradient(elements, -1.0F);
  std::vector<strata::ps::ShardCall> calls(static_cast<std::size_t>(client.num_servers()));
  for (long step = 1; steps == 0 || step <= steps; ++step) {
    for (std::size_t s = 0; s < calls.size(); ++s) {
      auto& call = calls[s];
      call = {};
      call.server = static_cast<int>(s);
      call.handle = shards.handles[s];
      call.operation = strata::ps::Operation::push_pull;
      call.type = strata::DataType::float32;
      call.count = elements;
      call.prefix = prefix;
      call.values = std::as_bytes(std::span(gradient));
      call.result = std::as_writable_bytes(std::span(shards.values[s]));
    }
    began = Clock::now();
    client.call(0, calls);
    for (std::size_t s = 0; s < calls.size(); ++s)
      if (!consistent(shards.values[s], calls[s].version, static_cast<int>(s))) return kWrongValues;
    if (step == 1) say("ready");
    say(fmt::format("step {}", step));
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  began = Clock::now();
  client.done();
  say("ok");
  return 0;
}

int pulls(std::span<const std::string_view> args, strata::ps::Client& client,
          Clock::time_point& began) {
  const auto elements = static_cast<std::size_t>(std::stol(std::string(args[1])));
  Shards shards = create_all(client, elements, began);
  std::vector<strata::ps::ShardCall> calls(static_cast<std::size_t>(client.num_servers()));
  for (long round = 1;; ++round) {
    for (std::size_t s = 0; s < calls.size(); ++s) {
      auto& call = calls[s];
      call = {};
      call.server = static_cast<int>(s);
      call.handle = shards.handles[s];
      call.operation = strata::ps::Operation::pull;
      call.type = strata::DataType::float32;
      call.count = elements;
      call.result = std::as_writable_bytes(std::span(shards.values[s]));
    }
    began = Clock::now();
    client.call(0, calls);
    for (std::size_t s = 0; s < calls.size(); ++s)
      if (!consistent(shards.values[s], calls[s].version, static_cast<int>(s))) return kWrongValues;
    if (round == 1) say("ready");
  }
}

// ---- garbage -----------------------------------------------------------------------------------

bool write_all(int fd, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

bool read_all(int fd, std::span<std::byte> bytes) {
  while (!bytes.empty()) {
    const auto n = ::recv(fd, bytes.data(), bytes.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return true;
}

// The connecting side of the handshake (transport/tcp/handshake.hpp), as a ps client runs it;
// false, saying why, when the server does not accept.
bool handshake(int fd, const strata::cluster::ClusterSpec& cluster, int rank) {
  namespace tcp = strata::transport::tcp;
  const auto token = strata::environment_variable("STRATA_CLUSTER_TOKEN");
  tcp::Hello mine;
  mine.connection = 0;
  mine.rank = rank;
  mine.world_size = cluster.collective_size();
  mine.flags = token ? tcp::Hello::kHasToken : 0;
  mine.cluster = strata::ps::ps_fingerprint(cluster);
  mine.tunables = strata::ps::kTunables;
  tcp::random_bytes(std::as_writable_bytes(std::span(&mine.incarnation, 1)));
  tcp::random_bytes(mine.nonce);
  const tcp::HelloBytes mine_bytes = tcp::encode(mine);
  std::array<std::byte, 1> status{};
  if (!write_all(fd, mine_bytes) || !read_all(fd, status)) {
    say("handshake: the connection broke");
    return false;
  }
  if (static_cast<tcp::HandshakeStatus>(status[0]) == tcp::HandshakeStatus::challenge) {
    std::array<std::byte, tcp::kNonceBytes> challenge{};
    if (!token || !read_all(fd, challenge)) return false;
    const tcp::Mac mac = tcp::handshake_mac(*token, "strata-connect", mine_bytes, challenge);
    if (!write_all(fd, mac) || !read_all(fd, status)) return false;
  }
  if (static_cast<tcp::HandshakeStatus>(status[0]) != tcp::HandshakeStatus::accepted) {
    say(fmt::format("handshake refused: {}",
                    tcp::to_string(static_cast<tcp::HandshakeStatus>(status[0]))));
    return false;
  }
  std::array<std::byte, tcp::kHelloBytes + tcp::kMacBytes> theirs{};
  if (!read_all(fd, std::span(theirs).first(tcp::kHelloBytes + (token ? tcp::kMacBytes : 0))))
    return false;
  const std::array<std::byte, 1> accepted{static_cast<std::byte>(tcp::HandshakeStatus::accepted)};
  return write_all(fd, accepted);
}

int garbage(std::span<const std::string_view> args,
            const strata::cluster::ResolvedCluster& resolved) {
  const bool frames = args[1] == "frames";
  if (!frames && args[1] != "raw") return kBadArguments;
  const int connections = std::stoi(std::string(args[2]));
  const auto& address = resolved.cluster.address({TaskType::ps, 0});
  int dropped = 0;
  for (int c = 0; c < connections; ++c) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 1;
    timeval wait{5, 0};  // how long the server may take to drop the connection
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    sockaddr_in target{};
    target.sin_family = AF_INET;
    target.sin_port = htons(address.port);
    ::inet_pton(AF_INET, address.host.c_str(), &target.sin_addr);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&target), sizeof target) != 0) {
      say(fmt::format("connect: errno {}", errno));
      ::close(fd);
      return 1;
    }
    if (frames && !handshake(fd, resolved.cluster, 0)) {
      ::close(fd);
      return 1;
    }
    std::array<std::byte, 4096> junk{};
    strata::transport::tcp::random_bytes(junk);
    // Neither a Hello's magic ("STRH") nor a frame's (0x5346, little-endian "FS").
    junk[0] = std::byte{'x'};
    write_all(fd, junk);  // the server may close before it has read everything
    std::array<std::byte, 256> answer{};
    for (;;) {
      const auto n = ::recv(fd, answer.data(), answer.size(), 0);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;  // an answer to garbage: not dropped yet
      // Closed (EOF, or reset: the server left bytes unread), not timed out.
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ++dropped;
      break;
    }
    ::close(fd);
  }
  say(fmt::format("garbage dropped {} of {}", dropped, connections));
  return dropped == connections ? 0 : 1;
}

int run(std::span<const std::string_view> args, Clock::time_point& began) {
  auto resolved = strata::cluster::resolve_cluster();
  const auto count = args.size();
  if (args[0] == "serve" && count == 1) {
    if (resolved.task.type != TaskType::ps) return kBadArguments;
    return serve(resolved, began);
  }
  if (!resolved.in_collective_group()) return kBadArguments;
  if (args[0] == "garbage" && count == 3) return garbage(args, resolved);
  const bool lockstep = count == 6 && args[4] == "lockstep";
  if (!(args[0] == "pushes" && (count == 4 || lockstep)) && !(args[0] == "pulls" && count == 2))
    return kBadArguments;
  began = Clock::now();
  strata::ps::Client client(resolved.cluster, resolved.rank, 1);
  if (args[0] == "pushes") return pushes(args, client, resolved.rank, began);
  return pulls(args, client, began);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  auto began = Clock::now();
  int code = kBadArguments;
  if (!args.empty()) {
    try {
      code = run(args, began);
    } catch (const std::exception& error) {
      const auto now = Clock::now();
      const auto call_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - began).count();
      const auto at_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
      say(fmt::format("error {} {} {} {}", class_of(error), call_ms, at_ns, error.what()));
      return static_cast<int>(strata::exit_status_of(error));
    }
  }
  if (code == kBadArguments)
    std::fputs(
        "usage: strata_test_ps_task serve | pushes STEPS ELEMENTS PAUSE_MS [lockstep REPLICAS] | "
        "pulls ELEMENTS | "
        "garbage raw|frames N\n",
        stderr);
  return code;
}
