// Tests for strata/cluster/cluster_spec.hpp: TaskType, Address and parse_address, and
// ClusterSpec (lookup, the collective rank rule, collective_addresses, fingerprint).
#include <strata/cluster/cluster_spec.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace {

using strata::cluster::Address;
using strata::cluster::ClusterSpec;
using strata::cluster::parse_address;
using strata::cluster::Task;
using strata::cluster::TaskType;

constexpr Task chief{TaskType::chief, 0};
constexpr Task worker(int index) {
  return Task{TaskType::worker, index};
}
constexpr Task ps(int index) {
  return Task{TaskType::ps, index};
}
constexpr Task evaluator(int index) {
  return Task{TaskType::evaluator, index};
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Runs `f`, requires it to throw `Exception` with rank -1 and `operation`, and returns the
// message (empty when nothing or something else was thrown: other exceptions propagate and
// fail the test).
template <class Exception, class F>
std::string error_message(F&& f, std::string_view operation) {
  try {
    f();
  } catch (const Exception& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.rank() == -1);
    CHECK(e.operation() == operation);
    CHECK(message.starts_with(fmt::format("strata: {}: ", operation)));
    return message;
  }
  FAIL_CHECK("no exception was thrown");
  return "";
}

// Checks that parse_address rejects `text`, quoting it and saying `why`.
void check_bad_address(std::string_view text, std::string_view why) {
  CAPTURE(std::string(text));
  const std::string message =
      error_message<strata::ConfigurationError>([&] { parse_address(text); }, "address");
  CAPTURE(message);
  // Texts longer than 96 bytes are cut in the message (checked below).
  if (text.size() <= 96)
    CHECK(contains(message, fmt::format("cannot use '{}' as an address", text)));
  CHECK(contains(message, why));
  CHECK(contains(message, "; write host:port"));
}

ClusterSpec make_spec(std::initializer_list<std::pair<Task, std::string_view>> tasks) {
  ClusterSpec spec;
  for (const auto& [task, address] : tasks)
    spec.add(task, parse_address(address));
  return spec;
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

TEST_CASE("TaskType names, parsing and formatting") {
  CHECK(std::size(strata::cluster::kTaskTypes) == 4);
  for (const TaskType type : strata::cluster::kTaskTypes) {
    CHECK(strata::cluster::parse_task_type(to_string(type)) == type);
    CHECK(fmt::format("{}", type) == to_string(type));
  }
  CHECK(to_string(TaskType::chief) == "chief");
  CHECK(to_string(TaskType::worker) == "worker");
  CHECK(to_string(TaskType::ps) == "ps");
  CHECK(to_string(TaskType::evaluator) == "evaluator");
  CHECK(to_string(static_cast<TaskType>(9)) == "invalid");
  for (const char* name : {"master", "Worker", "PS", "", " worker", "workers", "invalid"}) {
    CAPTURE(name);
    CHECK_FALSE(strata::cluster::parse_task_type(name).has_value());
  }
  static_assert(strata::cluster::parse_task_type("evaluator") == TaskType::evaluator);
  CHECK(fmt::format("{}", worker(3)) == "worker 3");
  CHECK(fmt::format("{}", chief) == "chief 0");
}

TEST_CASE("parse_address reads host:port and [IPv6]:port") {
  CHECK(parse_address("10.0.0.1:2222") == Address{"10.0.0.1", 2222});
  CHECK(parse_address("worker-0.example.com:2222") == Address{"worker-0.example.com", 2222});
  CHECK(parse_address("tfjob-worker-0.default.svc:2222") ==
        Address{"tfjob-worker-0.default.svc", 2222});
  CHECK(parse_address("localhost:1") == Address{"localhost", 1});
  CHECK(parse_address("my_host:65535") == Address{"my_host", 65535});
  CHECK(parse_address("host.example.com.:80") == Address{"host.example.com.", 80});
  CHECK(parse_address("h:0080") == Address{"h", 80});  // leading zeros are still decimal
  CHECK(parse_address("[::1]:80") == Address{"::1", 80});
  CHECK(parse_address("[::]:80") == Address{"::", 80});
  CHECK(parse_address("[2001:db8::8a2e:370:7334]:443") == Address{"2001:db8::8a2e:370:7334", 443});
  CHECK(parse_address("[1:2:3:4:5:6:7:8]:9") == Address{"1:2:3:4:5:6:7:8", 9});
  CHECK(parse_address("[::ffff:10.0.0.1]:2222") == Address{"::ffff:10.0.0.1", 2222});
  CHECK(parse_address("[fe80::1%eth0]:2222") == Address{"fe80::1%eth0", 2222});

  // to_string writes what parse_address reads back.
  for (const char* text :
       {"10.0.0.1:2222", "localhost:1", "[::1]:80", "[fe80::1%eth0]:2222", "[2001:db8::1]:65535"}) {
    CAPTURE(text);
    const Address address = parse_address(text);
    CHECK(address.to_string() == text);
    CHECK(fmt::format("{}", address) == text);
    CHECK(parse_address(address.to_string()) == address);
  }
}

TEST_CASE("parse_address rejects anything else with a ConfigurationError quoting the text") {
  check_bad_address("", "it is empty");
  check_bad_address("localhost", "there is no port");
  check_bad_address("localhost:", "there is no port");
  check_bad_address("[::1]", "there is no port");
  check_bad_address("[::1]:", "there is no port");
  check_bad_address(":2222", "the host is empty");
  check_bad_address("[]:2222", "the host is empty");
  check_bad_address("host:http", "the port 'http' is not a decimal number");
  check_bad_address("host:-1", "the port '-1' is not a decimal number");
  check_bad_address("host:+80", "the port '+80' is not a decimal number");
  check_bad_address("host:80 ", "the port '80 ' is not a decimal number");
  check_bad_address("host:0", "the port is 0");
  check_bad_address("host:65536", "the port '65536' is above 65535");
  check_bad_address("host:99999999999999999999999", "is above 65535");
  check_bad_address("::1:80", "an IPv6 address needs brackets");
  check_bad_address("fe80::1", "an IPv6 address needs brackets");
  check_bad_address("grpc://host:80", "more than one ':' outside brackets");
  check_bad_address("[::1]80", "'80' follows ']' where ':port' should");
  check_bad_address("[::1:80", "'[' has no matching ']'");
  check_bad_address("[localhost]:80", "'localhost' is not an IPv6 address");
  check_bad_address("[1:2:3:4:5:6:7:8:9]:80", "is not an IPv6 address");
  check_bad_address("[1::2::3]:80", "is not an IPv6 address");
  check_bad_address("[12345::1]:80", "is not an IPv6 address");
  check_bad_address(" host:80", "the host contains ' '");
  check_bad_address("host/path:80", "the host contains '/'");
  check_bad_address("-host:80", "the host starts with '-'");
  check_bad_address(".host:80", "the host starts with '.'");
  check_bad_address("a..b:80", "empty label");
  check_bad_address(std::string(254, 'a') + ":80", "254 characters long (at most 253)");

  // The caller names the setting; unprintable bytes are escaped in the message.
  const std::string message = error_message<strata::ConfigurationError>(
      [] { parse_address("host\n:80", "MASTER_ADDR"); }, "MASTER_ADDR");
  CHECK(contains(message, "cannot use 'host\\x0a:80' as an address"));
  // A long text is cut in the message.
  const std::string long_message = error_message<strata::ConfigurationError>(
      [] { parse_address(std::string(5000, 'x')); }, "address");
  CHECK(contains(long_message, "(cut, 5000 bytes in all)"));
  CHECK(long_message.size() < 600);
}

TEST_CASE("ClusterSpec adds tasks and looks them up") {
  ClusterSpec spec;
  CHECK(spec.empty());
  CHECK(spec.collective_size() == 0);
  CHECK(spec.collective_addresses().empty());
  CHECK(spec.canonical().empty());
  for (const TaskType type : strata::cluster::kTaskTypes)
    CHECK(spec.num_tasks(type) == 0);

  spec.add(worker(1), {"host1", 2222});
  spec.add(chief, {"host0", 2222});
  spec.add(worker(0), {"::1", 2222});
  spec.add(ps(0), {"host2", 2222});
  spec.add(evaluator(0), {"host3", 2222});
  CHECK_FALSE(spec.empty());
  CHECK(spec.num_tasks(TaskType::chief) == 1);
  CHECK(spec.num_tasks(TaskType::worker) == 2);
  CHECK(spec.num_tasks(TaskType::ps) == 1);
  CHECK(spec.num_tasks(TaskType::evaluator) == 1);
  CHECK(spec.has_chief());
  CHECK(spec.tasks(TaskType::worker) ==
        std::map<int, Address>{{0, Address{"::1", 2222}}, {1, Address{"host1", 2222}}});
  CHECK(spec.contains(worker(1)));
  CHECK_FALSE(spec.contains(worker(2)));
  CHECK_FALSE(spec.contains(ps(1)));
  CHECK(spec.address(worker(0)) == Address{"::1", 2222});
  CHECK(spec.address(evaluator(0)) == Address{"host3", 2222});
  CHECK(spec.find(Address{"host2", 2222}) == ps(0));
  CHECK_FALSE(spec.find(Address{"host2", 2223}).has_value());
  // A TaskType outside the enum is simply absent.
  CHECK(spec.tasks(static_cast<TaskType>(7)).empty());
  CHECK_FALSE(spec.contains(Task{static_cast<TaskType>(7), 0}));

  const std::string message = error_message<strata::ConfigurationError>(
      [&] { (void)spec.address(worker(5)); }, "ClusterSpec::address");
  CHECK(contains(message, "task not in cluster: worker 5"));
  CHECK(contains(message, "(the cluster has chief 0; worker 0-1; ps 0; evaluator 0)"));

  // Sparse jobs are allowed.
  ClusterSpec sparse;
  sparse.add(worker(3), {"h3", 1});
  sparse.add(worker(1), {"h1", 1});
  CHECK(sparse.num_tasks(TaskType::worker) == 2);
  CHECK(sparse.tasks(TaskType::worker).begin()->first == 1);
}

TEST_CASE("ClusterSpec::add refuses invalid tasks and leaves the cluster unchanged") {
  ClusterSpec spec = make_spec({{chief, "c:1"}, {worker(0), "w:1"}, {ps(0), "p:1"}});
  const ClusterSpec before = spec;
  auto check_refused = [&](Task task, Address address,
                           std::initializer_list<std::string_view> parts) {
    CAPTURE(fmt::format("{} at {}:{}", task, address.host, address.port));
    const std::string message = error_message<strata::ConfigurationError>(
        [&] { spec.add(task, address); }, "ClusterSpec::add");
    CAPTURE(message);
    for (const std::string_view part : parts)
      CHECK(contains(message, part));
    CHECK(spec == before);
    CHECK(spec.fingerprint() == before.fingerprint());
  };
  check_refused(worker(0), {"other", 1},
                {"cannot add worker 0 at 'other:1'", "already has worker 0, at 'w:1'",
                 "give each task of a job its own index"});
  check_refused(worker(-1), {"other", 1}, {"cannot add worker -1", "negative"});
  check_refused(worker(strata::cluster::kMaxTaskIndex + 1), {"other", 1},
                {"above the limit of 1000000"});
  check_refused(worker(1), {"p", 1},
                {"cannot add worker 1 at 'p:1'", "ps 0 already uses this address",
                 "give every task its own host:port"});
  check_refused(chief, {"c2", 1}, {"already has a chief, at 'c:1'", "at most one chief"});
  check_refused(worker(1), {"w", 0}, {"the port is 0"});
  check_refused(worker(1), {"", 1}, {"the host is empty"});
  check_refused(worker(1), {"bad host", 1}, {"the host contains ' '"});
  check_refused(worker(1), {"1:2", 1}, {"is not a valid name or IPv6 address"});
  check_refused(Task{static_cast<TaskType>(4), 0}, {"x", 1}, {"4 is not a task type"});

  ClusterSpec no_chief;
  const std::string message = error_message<strata::ConfigurationError>(
      [&] {
        no_chief.add(Task{TaskType::chief, 1}, {"c", 1});
      },
      "ClusterSpec::add");
  CHECK(contains(message, "the chief is always task 0"));
  CHECK(no_chief.empty());

  // The same host on another port, and the same port on another host, are other addresses.
  spec.add(worker(1), {"w", 2});
  spec.add(worker(2), {"x", 1});
  CHECK(spec.num_tasks(TaskType::worker) == 3);
}

TEST_CASE("the collective group is the chief, then the workers; ps and evaluator are outside") {
  const ClusterSpec spec = make_spec({{worker(2), "w2:1"},
                                      {ps(0), "p0:1"},
                                      {worker(0), "w0:1"},
                                      {evaluator(0), "e0:1"},
                                      {chief, "c:1"},
                                      {worker(1), "w1:1"},
                                      {ps(1), "p1:1"}});
  CHECK(spec.collective_size() == 4);
  CHECK(spec.collective_rank(chief) == 0);
  CHECK(spec.collective_rank(worker(0)) == 1);
  CHECK(spec.collective_rank(worker(1)) == 2);
  CHECK(spec.collective_rank(worker(2)) == 3);
  CHECK_FALSE(spec.collective_rank(ps(0)).has_value());
  CHECK_FALSE(spec.collective_rank(ps(1)).has_value());
  CHECK_FALSE(spec.collective_rank(evaluator(0)).has_value());
  CHECK_FALSE(spec.collective_rank(worker(3)).has_value());
  CHECK_FALSE(spec.collective_rank(worker(-1)).has_value());
  CHECK_FALSE(spec.collective_rank(Task{TaskType::chief, 1}).has_value());
  for (int rank = 0; rank < spec.collective_size(); ++rank) {
    CAPTURE(rank);
    CHECK(spec.collective_rank(spec.collective_task(rank)) == rank);
  }
  CHECK(spec.collective_task(0) == chief);
  CHECK(spec.collective_task(3) == worker(2));
  CHECK(spec.collective_addresses() ==
        std::vector<Address>{{"c", 1}, {"w0", 1}, {"w1", 1}, {"w2", 1}});

  for (const int rank : {-1, 4, 1000}) {
    CAPTURE(rank);
    const std::string message = error_message<strata::UsageError>(
        [&] { (void)spec.collective_task(rank); }, "ClusterSpec::collective_task");
    CHECK(contains(message,
                   fmt::format("rank {} is out of range for a collective group of 4", rank)));
  }

  // Without a chief, worker 0 is rank 0.
  const ClusterSpec workers = make_spec({{worker(1), "w1:1"}, {worker(0), "w0:1"}, {ps(0), "p:1"}});
  CHECK(workers.collective_size() == 2);
  CHECK_FALSE(workers.has_chief());
  CHECK(workers.collective_rank(worker(0)) == 0);
  CHECK(workers.collective_rank(worker(1)) == 1);
  CHECK_FALSE(workers.collective_rank(chief).has_value());
  CHECK(workers.collective_task(0) == worker(0));
  CHECK(workers.collective_addresses() == std::vector<Address>{{"w0", 1}, {"w1", 1}});

  // A chief alone is a group of one; a cluster of ps tasks only has no group.
  CHECK(make_spec({{chief, "c:1"}}).collective_addresses() == std::vector<Address>{{"c", 1}});
  const ClusterSpec ps_only = make_spec({{ps(0), "p:1"}});
  CHECK(ps_only.collective_size() == 0);
  CHECK(ps_only.collective_addresses().empty());
  error_message<strata::UsageError>([&] { (void)ps_only.collective_task(0); },
                                    "ClusterSpec::collective_task");
}

TEST_CASE("collective_addresses refuses a worker job with holes, naming the missing indices") {
  const ClusterSpec spec = make_spec({{chief, "c:1"}, {worker(1), "w1:1"}, {worker(4), "w4:1"}});
  // Ranks still follow the order of the workers present.
  CHECK(spec.collective_rank(worker(1)) == 1);
  CHECK(spec.collective_rank(worker(4)) == 2);
  CHECK(spec.collective_task(2) == worker(4));
  const std::string message = error_message<strata::ConfigurationError>(
      [&] { (void)spec.collective_addresses(); }, "ClusterSpec::collective_addresses");
  CHECK(contains(message, "worker indices 0, 2, 3 are missing (present: 1, 4)"));
  CHECK(contains(message, "needs every worker from 0 to 4"));
  CHECK(contains(message, "renumber the workers from 0 without gaps"));

  const std::string one = error_message<strata::ConfigurationError>(
      [] {
        (void)make_spec({{worker(1), "w1:1"}}).collective_addresses();
      },
      "ClusterSpec::collective_addresses");
  CHECK(contains(one, "worker index 0 is missing"));

  // Many holes: the first few are listed, the rest counted.
  const std::string many = error_message<strata::ConfigurationError>(
      [] {
        (void)make_spec({{worker(100'000), "w:1"}}).collective_addresses();
      },
      "ClusterSpec::collective_addresses");
  CHECK(contains(many, "worker indices 0, 1, 2, "));
  CHECK(contains(many, ", 15 and 99984 more are missing"));
}

TEST_CASE("fingerprint hashes the canonical text and identifies the cluster") {
  const ClusterSpec a = make_spec({{chief, "host0:2222"},
                                   {worker(0), "host1:2222"},
                                   {worker(1), "[::1]:2222"},
                                   {ps(0), "p:1"}});
  CHECK(a.canonical() == "chief:0=host0:2222;worker:0=host1:2222;worker:1=[::1]:2222;ps:0=p:1");
  CHECK(a.fingerprint() == fnv1a(a.canonical()));
  CHECK(ClusterSpec().fingerprint() == fnv1a(""));

  // The order of add() does not matter.
  const ClusterSpec b = make_spec({{ps(0), "p:1"},
                                   {worker(1), "[::1]:2222"},
                                   {worker(0), "host1:2222"},
                                   {chief, "host0:2222"}});
  CHECK(a == b);
  CHECK(a.fingerprint() == b.fingerprint());

  // Any change of address, index or job changes it.
  const std::vector<ClusterSpec> others = {
      make_spec({{chief, "host0:2223"},
                 {worker(0), "host1:2222"},
                 {worker(1), "[::1]:2222"},
                 {ps(0), "p:1"}}),
      make_spec({{chief, "host0:2222"},
                 {worker(0), "host1:2222"},
                 {worker(2), "[::1]:2222"},
                 {ps(0), "p:1"}}),
      make_spec({{chief, "host0:2222"},
                 {worker(0), "host1:2222"},
                 {worker(1), "[::2]:2222"},
                 {ps(0), "p:1"}}),
      make_spec({{chief, "host0:2222"},
                 {worker(0), "host1:2222"},
                 {worker(1), "[::1]:2222"},
                 {evaluator(0), "p:1"}}),
      make_spec({{worker(0), "host0:2222"},
                 {worker(1), "host1:2222"},
                 {worker(2), "[::1]:2222"},
                 {ps(0), "p:1"}}),
      make_spec({{chief, "host0:2222"}, {worker(0), "host1:2222"}, {worker(1), "[::1]:2222"}}),
  };
  for (const ClusterSpec& other : others) {
    CAPTURE(other.canonical());
    CHECK(other != a);
    CHECK(other.fingerprint() != a.fingerprint());
  }
}

}  // namespace
