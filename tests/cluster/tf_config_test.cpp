// Tests for strata/cluster/tf_config.hpp: parse_tf_config on TensorFlow's and Kubeflow's
// documented forms, one check per kind of malformed TF_CONFIG, make_tf_config round trips and
// tf_config_from_environment.
#include <strata/cluster/tf_config.hpp>

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/error.hpp>

namespace {

using strata::cluster::Address;
using strata::cluster::ClusterSpec;
using strata::cluster::make_tf_config;
using strata::cluster::parse_tf_config;
using strata::cluster::Task;
using strata::cluster::TaskType;
using strata::cluster::TfConfig;

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

// Parses `json`, requires a ConfigurationError for TF_CONFIG (rank -1) whose message contains
// every one of `parts`, and returns the message.
std::string check_rejected(std::string_view json, std::initializer_list<std::string_view> parts) {
  CAPTURE(std::string(json));
  try {
    parse_tf_config(json);
  } catch (const strata::ConfigurationError& e) {
    const std::string message = e.what();
    CAPTURE(message);
    CHECK(e.rank() == -1);
    CHECK(e.operation() == "TF_CONFIG");
    CHECK(message.starts_with("strata: TF_CONFIG: "));
    CHECK(contains(message, "; "));  // what happened; what to do
    for (const std::string_view part : parts) {
      CAPTURE(part);
      CHECK(contains(message, part));
    }
    return message;
  }
  FAIL_CHECK("TF_CONFIG was accepted");
  return "";
}

// A cluster with the jobs `{"worker": [...]}` as `parse_tf_config` reads them.
ClusterSpec make_spec(std::initializer_list<std::pair<Task, std::string_view>> tasks) {
  ClusterSpec spec;
  for (const auto& [task, address] : tasks)
    spec.add(task, strata::cluster::parse_address(address));
  return spec;
}

// Sets or clears TF_CONFIG for one scope and restores what was there before.
class ScopedTfConfig {
 public:
  explicit ScopedTfConfig(const char* value) {
    if (const char* old = std::getenv("TF_CONFIG")) saved_ = old;
    if (value != nullptr) {
      ::setenv("TF_CONFIG", value, 1);
    } else {
      ::unsetenv("TF_CONFIG");
    }
  }
  ~ScopedTfConfig() {
    if (saved_) {
      ::setenv("TF_CONFIG", saved_->c_str(), 1);
    } else {
      ::unsetenv("TF_CONFIG");
    }
  }
  ScopedTfConfig(const ScopedTfConfig&) = delete;
  ScopedTfConfig& operator=(const ScopedTfConfig&) = delete;

 private:
  std::optional<std::string> saved_;
};

// The cluster of the tf.distribute multi-worker tutorial (MultiWorkerMirroredStrategy).
constexpr std::string_view kTutorial = R"({
    "cluster": {
        "worker": ["localhost:12345", "localhost:23456"]
    },
    "task": {"type": "worker", "index": 0}
})";

TEST_CASE("the tf.distribute multi-worker tutorial's TF_CONFIG") {
  const TfConfig config = parse_tf_config(kTutorial);
  CHECK(config.cluster ==
        make_spec({{worker(0), "localhost:12345"}, {worker(1), "localhost:23456"}}));
  CHECK(config.task == worker(0));
  CHECK(config.environment.empty());
  CHECK(config.cluster.collective_size() == 2);
  CHECK(config.cluster.collective_rank(*config.task) == 0);
  CHECK(config.cluster.collective_addresses() ==
        std::vector<Address>{{"localhost", 12345}, {"localhost", 23456}});

  // The second worker of the tutorial.
  const TfConfig second = parse_tf_config(R"({"cluster": {"worker": ["localhost:12345",
      "localhost:23456"]}, "task": {"type": "worker", "index": 1}})");
  CHECK(second.task == worker(1));
  CHECK(second.cluster.collective_rank(*second.task) == 1);
  CHECK(second.cluster.fingerprint() == config.cluster.fingerprint());
}

TEST_CASE("a chief, workers, parameter servers and an evaluator (ParameterServerStrategy)") {
  const TfConfig config = parse_tf_config(R"({
      "cluster": {
          "chief": ["host0:2222"],
          "worker": ["host1:2222", "host2:2222", "host3:2222"],
          "ps": ["host4:2222", "host5:2222"],
          "evaluator": ["host6:2222"]
      },
      "task": {"type": "chief", "index": 0},
      "rpc_layer": "grpc"
  })");
  CHECK(config.task == chief);
  CHECK(config.cluster.num_tasks(TaskType::chief) == 1);
  CHECK(config.cluster.num_tasks(TaskType::worker) == 3);
  CHECK(config.cluster.num_tasks(TaskType::ps) == 2);
  CHECK(config.cluster.num_tasks(TaskType::evaluator) == 1);
  CHECK(config.cluster.address(ps(1)) == Address{"host5", 2222});
  CHECK(config.cluster.address(evaluator(0)) == Address{"host6", 2222});
  CHECK(config.cluster.collective_size() == 4);
  CHECK(config.cluster.collective_rank(chief) == 0);
  CHECK(config.cluster.collective_rank(worker(2)) == 3);
  CHECK_FALSE(config.cluster.collective_rank(ps(0)).has_value());
  CHECK_FALSE(config.cluster.collective_rank(evaluator(0)).has_value());

  // The evaluator and a ps read the same cluster, with their own task.
  const TfConfig eval = parse_tf_config(R"({"cluster": {"chief": ["host0:2222"],
      "worker": ["host1:2222", "host2:2222", "host3:2222"], "ps": ["host4:2222", "host5:2222"],
      "evaluator": ["host6:2222"]}, "task": {"type": "evaluator", "index": 0}})");
  CHECK(eval.task == evaluator(0));
  CHECK(eval.cluster == config.cluster);
  const TfConfig ps1 = parse_tf_config(R"({"cluster": {"chief": ["host0:2222"],
      "worker": ["host1:2222", "host2:2222", "host3:2222"], "ps": ["host4:2222", "host5:2222"],
      "evaluator": ["host6:2222"]}, "task": {"type": "ps", "index": 1}})");
  CHECK(ps1.task == ps(1));
}

TEST_CASE("Kubeflow's TFJob forms: dense with environment, and sparse") {
  // What the training operator sets by default.
  const TfConfig dense = parse_tf_config(
      R"({"cluster":{"ps":["mnist-ps-0.kubeflow.svc:2222"],"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"})");
  CHECK(dense.environment == "cloud");
  CHECK(dense.task == worker(1));
  CHECK(dense.cluster.address(worker(1)) == Address{"mnist-worker-1.kubeflow.svc", 2222});

  // With enableDynamicWorker: each worker sees only itself and the ps tasks.
  const TfConfig sparse = parse_tf_config(
      R"({"cluster":{"worker":{"1":"mnist-worker-1.kubeflow.svc:2222"},"ps":["mnist-ps-0.kubeflow.svc:2222","mnist-ps-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1}})");
  CHECK(sparse.task == worker(1));
  CHECK(sparse.cluster.tasks(TaskType::worker) ==
        std::map<int, Address>{{1, Address{"mnist-worker-1.kubeflow.svc", 2222}}});
  CHECK(sparse.cluster.num_tasks(TaskType::ps) == 2);
  CHECK_FALSE(sparse.cluster.contains(worker(0)));
  // Enough for a parameter-server worker, not for a collective.
  CHECK_THROWS_AS((void)sparse.cluster.collective_addresses(), strata::ConfigurationError);

  // TF's own test of the sparse form, with several sparse jobs.
  const TfConfig several = parse_tf_config(R"({"cluster": {"chief": {"0": "c:1"},
      "worker": {"3": "w3:1", "10": "w10:1"}, "evaluator": {"2": "e:1"}},
      "task": {"type": "worker", "index": 10}})");
  CHECK(several.cluster ==
        make_spec(
            {{chief, "c:1"}, {worker(3), "w3:1"}, {worker(10), "w10:1"}, {evaluator(2), "e:1"}}));
  CHECK(several.task == worker(10));
}

TEST_CASE("unknown top-level keys are ignored; task and environment are optional") {
  const TfConfig config = parse_tf_config(R"({"rpc_layer": "grpc", "model_dir": "/tmp/m",
      "cluster": {"worker": ["w:1"]}, "extra": {"nested": [1, 2, {"deep": null}]},
      "environment": null, "job": 7})");
  CHECK(config.cluster == make_spec({{worker(0), "w:1"}}));
  CHECK_FALSE(config.task.has_value());
  CHECK(config.environment.empty());

  const TfConfig google = parse_tf_config(
      R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}, "environment": "google"})");
  CHECK(google.environment == "google");

  // Nesting under an ignored key is accepted up to the cap; deeper is refused (see the
  // "malformed: not JSON" cases), never a stack overflow or memory in proportion.
  const std::string deep = R"({"cluster": {"worker": ["w:1"]}, "x": )" +
                           std::string(strata::cluster::kMaxTfConfigDepth - 1, '[') +
                           std::string(strata::cluster::kMaxTfConfigDepth - 1, ']') + "}";
  CHECK(parse_tf_config(deep).cluster.num_tasks(TaskType::worker) == 1);
  CHECK_THROWS_AS(parse_tf_config(R"({"cluster": {"worker": ["w:1"]}, "x": )" +
                                  std::string(100'000, '[') + std::string(100'000, ']') + "}"),
                  strata::ConfigurationError);
}

TEST_CASE("task.index may be an integer or a string of digits") {
  const std::string cluster = R"({"cluster": {"worker": ["w0:1", "w1:1", "w2:1"]}, "task": )";
  CHECK(parse_tf_config(cluster + R"({"type": "worker", "index": 2}})").task == worker(2));
  CHECK(parse_tf_config(cluster + R"({"type": "worker", "index": "2"}})").task == worker(2));
  CHECK(parse_tf_config(cluster + R"({"type": "worker", "index": "002"}})").task == worker(2));
  CHECK(parse_tf_config(cluster + R"({"index": "0", "type": "worker"}})").task == worker(0));
}

TEST_CASE("equal clusters have equal fingerprints however TF_CONFIG spells them") {
  const TfConfig reference = parse_tf_config(
      R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]}})");
  for (const char* spelling : {
           R"({"cluster": {"ps": ["p:1"], "worker": ["w0:1", "w1:1"], "chief": ["c:1"]}})",
           R"({"cluster": {"worker": {"1": "w1:1", "0": "w0:1"}, "chief": {"0": "c:1"},
               "ps": {"0": "p:1"}}, "task": {"type": "ps", "index": "0"}})",
           "{\n\t\"cluster\" :\n{ \"chief\" : [ \"c:1\" ] ,\"worker\":[\"w0:1\",\"w1:1\"],"
           "\"ps\":[\"p:1\"]}\r\n}  ",
       }) {
    CAPTURE(spelling);
    const TfConfig config = parse_tf_config(spelling);
    CHECK(config.cluster == reference.cluster);
    CHECK(config.cluster.fingerprint() == reference.cluster.fingerprint());
  }
  for (
      const char* other : {
          R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:2"], "ps": ["p:1"]}})",
          R"({"cluster": {"chief": ["c:1"], "worker": ["w1:1", "w0:1"], "ps": ["p:1"]}})",
          R"({"cluster": {"chief": ["c:1"], "worker": {"0": "w0:1", "2": "w1:1"}, "ps": ["p:1"]}})",
          R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["p:1"]}})",
          R"({"cluster": {"worker": ["c:1", "w0:1", "w1:1"], "ps": ["p:1"]}})",
      }) {
    CAPTURE(other);
    CHECK(parse_tf_config(other).cluster.fingerprint() != reference.cluster.fingerprint());
  }
}

// ---- one test per kind of malformed TF_CONFIG ------------------------------------------------

constexpr std::string_view kFix = "; fix the JSON";

TEST_CASE("malformed: JSON syntax errors give the byte position") {
  check_rejected("", {"not valid JSON: syntax error at byte 1", kFix});
  check_rejected("{", {"not valid JSON: syntax error at byte 2", "unexpected end of input"});
  check_rejected(R"({"cluster": {"worker": ["w:1"]})", {"syntax error at byte 32"});
  check_rejected(R"({"cluster": {"worker": ["w:1",]}})", {"syntax error at byte 31"});
  check_rejected(R"({cluster: 1})", {"syntax error at byte 2", "object key"});
  check_rejected("{\"cluster\": {\"worker\": [\"w:1\xff\"]}}", {"ill-formed UTF-8"});
  check_rejected("{\"cluster\": {\"worker\": [\"w\n:1\"]}}", {"control character"});
  // Shell quoting lost: TF_CONFIG={cluster:{worker:[w:1]}}
  check_rejected("{cluster:{worker:[w:1]}}", {"syntax error at byte 2"});
  check_rejected(R"({"cluster": {"worker": ["w:1"]}} trailing)", {"syntax error at byte 36"});
  // A number JSON can write but not hold.
  check_rejected(R"({"cluster": {"worker": ["w:1"]}, "x": 1e309})",
                 {"not valid JSON: number overflow parsing '1e309'"});
  // Too long to be a cluster description: refused before parsing.
  check_rejected(std::string(strata::cluster::kMaxTfConfigBytes + 1, ' '),
                 {"bytes long, more than the limit of 16777216"});
  // Deep nesting is refused at the cap, before it costs memory, closed or not, even at the
  // size limit.
  check_rejected(std::string(200'000, '['), {"values nest deeper than 32 levels"});
  check_rejected(std::string(strata::cluster::kMaxTfConfigBytes, '['),
                 {"values nest deeper than 32 levels"});
  check_rejected(R"({"cluster": {"worker": ["w:1"]}, "x": )" + std::string(40, '[') +
                     std::string(40, ']') + "}",
                 {"values nest deeper than 32 levels"});
  // 32 levels are accepted (and ignored: an unknown key).
  CHECK_NOTHROW(strata::cluster::parse_tf_config(R"({"cluster": {"worker": ["w:1"]}, "x": )" +
                                                 std::string(31, '[') + std::string(31, ']') +
                                                 "}"));
}

TEST_CASE("malformed: the top level is not an object") {
  check_rejected("[]", {"the top level must be an object, got a list", "e.g. {\"cluster\""});
  check_rejected("null", {"the top level must be an object, got null"});
  check_rejected("42", {"got 42"});
  check_rejected(R"("{\"cluster\": {}}")", {"got \"{\"cluster\": {}}\""});  // double-encoded
}

TEST_CASE("malformed: \"cluster\" is missing, not an object, or has no job") {
  check_rejected("{}", {"there is no \"cluster\"", "describe the cluster"});
  check_rejected(R"({"Cluster": {"worker": ["w:1"]}})",
                 {"there is no \"cluster\" (keys are case sensitive)"});
  check_rejected(R"({"task": {"type": "worker", "index": 0}})", {"there is no \"cluster\""});
  check_rejected(R"({"cluster": ["w:1"]})",
                 {"\"cluster\" must be an object from job names to addresses, got a list"});
  check_rejected(R"({"cluster": "w:1"})", {"got \"w:1\""});
  check_rejected(R"({"cluster": null})", {"got null"});
  check_rejected(R"({"cluster": {}})", {"\"cluster\" has no jobs"});
}

TEST_CASE("malformed: unknown job names, with a hint for TF1's master") {
  check_rejected(R"({"cluster": {"master": ["m:1"], "worker": ["w:1"]}})",
                 {"unknown job \"master\" in cluster",
                  "TF2 calls the coordinating task \"chief\": rename \"master\" to \"chief\""});
  check_rejected(R"({"cluster": {"Worker": ["w:1"]}})",
                 {"unknown job \"Worker\"", "job names are lower case: write \"worker\""});
  check_rejected(R"({"cluster": {"workers": ["w:1"]}})",
                 {"unknown job \"workers\"",
                  "use only the jobs \"chief\", \"worker\", \"ps\" and \"evaluator\""});
  check_rejected(R"({"cluster": {"": ["w:1"]}})", {"unknown job \"\""});
}

TEST_CASE("malformed: a job that is neither a list nor an object, or is empty") {
  check_rejected(R"({"cluster": {"worker": "w:1"}})",
                 {"cluster.worker must be a list of addresses or an object from task index to "
                  "address, got \"w:1\"",
                  R"("worker": ["host0:2222", "host1:2222"])"});
  check_rejected(R"({"cluster": {"ps": 2}})", {"cluster.ps must be a list", "got 2"});
  check_rejected(R"({"cluster": {"ps": null}})", {"cluster.ps must be a list", "got null"});
  check_rejected(R"({"cluster": {"worker": []}})",
                 {"cluster.worker is empty", "list at least one address, or leave the job out"});
  check_rejected(R"({"cluster": {"worker": ["w:1"], "ps": {}}})", {"cluster.ps is empty"});
}

TEST_CASE("malformed: an address that is not a string") {
  check_rejected(R"({"cluster": {"worker": ["w:1", 2222]}})",
                 {"cluster.worker[1] must be an address string, got 2222",
                  "write each address as a string \"host:port\""});
  check_rejected(R"({"cluster": {"worker": [["w", 1]]}})", {"cluster.worker[0]", "got a list"});
  check_rejected(R"({"cluster": {"worker": {"3": {"host": "w"}}}})",
                 {"cluster.worker[\"3\"] must be an address string, got an object"});
  check_rejected(R"({"cluster": {"worker": [null]}})", {"got null"});
  check_rejected(R"({"cluster": {"worker": [true]}})", {"got true"});
}

TEST_CASE("malformed: a missing or bad port, or a bad host") {
  check_rejected(R"({"cluster": {"worker": ["w0:1", "w1"]}})",
                 {"cluster.worker[1]: cannot use 'w1' as an address: there is no port",
                  "write each address as a string \"host:port\""});
  check_rejected(R"({"cluster": {"worker": ["w:"]}})", {"'w:'", "there is no port"});
  check_rejected(R"({"cluster": {"worker": ["w:http"]}})",
                 {"the port 'http' is not a decimal number"});
  check_rejected(R"({"cluster": {"worker": ["w:0"]}})", {"'w:0'", "the port is 0"});
  check_rejected(R"({"cluster": {"ps": ["p:70000"]}})",
                 {"cluster.ps[0]: cannot use 'p:70000'", "the port '70000' is above 65535"});
  check_rejected(R"({"cluster": {"worker": [":2222"]}})", {"the host is empty"});
  check_rejected(R"({"cluster": {"worker": [""]}})", {"cannot use '' as an address: it is empty"});
  check_rejected(R"({"cluster": {"worker": ["grpc://w:1"]}})", {"more than one ':'"});
  check_rejected(R"({"cluster": {"worker": ["::1:2222"]}})", {"an IPv6 address needs brackets"});
  check_rejected(R"({"cluster": {"worker": {"2": "w 2:1"}}})",
                 {"cluster.worker[\"2\"]: cannot use 'w 2:1'", "the host contains ' '"});
}

TEST_CASE("malformed: a sparse index that is not a non-negative integer, or absurdly large") {
  for (const char* key : {"-1", "one", "", "1.0", " 1", "+1", "0x1"}) {
    CAPTURE(key);
    check_rejected(fmt::format(R"({{"cluster": {{"worker": {{"{}": "w:1"}}}}}})", key),
                   {fmt::format("cluster.worker[\"{}\"]: the key \"{}\" is not a task index (a "
                                "non-negative integer)",
                                key, key),
                    "key the tasks of a sparse job by their index"});
  }
  check_rejected(R"({"cluster": {"worker": {"1000001": "w:1"}}})",
                 {"cluster.worker[\"1000001\"]: the task index is above the limit of 1000000"});
  check_rejected(R"({"cluster": {"worker": {"99999999999999999999999": "w:1"}}})",
                 {"above the limit of 1000000"});
  // The largest index allowed is accepted without allocating per index.
  CHECK(parse_tf_config(R"({"cluster": {"worker": {"1000000": "w:1"}}})")
            .cluster.contains(worker(1'000'000)));
  // "1" and "01" are the same task.
  check_rejected(R"({"cluster": {"worker": {"1": "a:1", "01": "b:1"}}})",
                 {"worker 1 is listed twice", "list each task once"});
}

TEST_CASE("malformed: two tasks share an address; both are named") {
  check_rejected(R"({"cluster": {"worker": ["w0:1", "w1:1", "w0:1"]}})",
                 {"duplicate address 'w0:1': both worker 0 and worker 2 (cluster.worker[2]) use it",
                  "give every task its own host:port"});
  check_rejected(R"({"cluster": {"worker": ["h:1"], "ps": ["h:1"]}})",
                 {"duplicate address 'h:1'", "ps 0", "worker 0"});
  check_rejected(R"({"cluster": {"chief": ["[::1]:5"], "evaluator": {"4": "[::1]:5"}}})",
                 {"duplicate address '[::1]:5'", "chief 0", "evaluator 4"});
}

TEST_CASE("malformed: more than one chief") {
  check_rejected(R"({"cluster": {"chief": ["c0:1", "c1:1"], "worker": ["w:1"]}})",
                 {"more than one chief: cluster.chief has 2 tasks",
                  "a cluster has at most one chief; list the other tasks under \"worker\""});
  check_rejected(R"({"cluster": {"chief": {"0": "c0:1", "1": "c1:1"}}})",
                 {"more than one chief: cluster.chief has 2 tasks"});
  check_rejected(R"({"cluster": {"chief": {"1": "c:1"}}})",
                 {"cluster.chief[\"1\"]: the chief is always task 0"});
}

TEST_CASE("malformed: \"task\" is not an object") {
  const std::string cluster = R"({"cluster": {"worker": ["w:1"]}, "task": )";
  check_rejected(cluster + "\"worker\"}",
                 {"\"task\" must be an object, got \"worker\"",
                  R"(write e.g. "task": {"type": "worker", "index": 0}, or leave it out)"});
  check_rejected(cluster + "[\"worker\", 0]}", {"\"task\" must be an object, got a list"});
  check_rejected(cluster + "null}", {"\"task\" must be an object, got null"});
}

TEST_CASE("malformed: task.type missing, unknown, or not in the cluster") {
  const std::string cluster = R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]}, "task": )";
  check_rejected(cluster + R"({"index": 0}})",
                 {"task.type is missing", "set \"type\" to this task's job"});
  check_rejected(cluster + R"({"type": 1, "index": 0}})", {"task.type must be a string, got 1"});
  check_rejected(cluster + R"({"type": "master", "index": 0}})",
                 {"unknown task.type \"master\"", "TF2 calls the coordinating task \"chief\""});
  check_rejected(cluster + R"({"type": "boss", "index": 0}})",
                 {"unknown task.type \"boss\"", "\"chief\", \"worker\", \"ps\" and \"evaluator\""});
  check_rejected(cluster + R"({"type": "ps", "index": 0}})",
                 {"task not in cluster: task.type is \"ps\" but the cluster has no \"ps\" job (it "
                  "has chief 0; worker 0)",
                  "add this task's job to the cluster, or fix task.type"});
}

TEST_CASE("malformed: task.index missing, not an integer, negative, or out of range") {
  const std::string dense = R"({"cluster": {"worker": ["w0:1", "w1:1", "w2:1"]}, "task": )";
  check_rejected(dense + R"({"type": "worker"}})",
                 {"task.index is missing", "set \"index\" to this task's position in its job"});
  check_rejected(dense + R"({"type": "worker", "index": 1.5}})",
                 {"task.index must be an integer, got 1.5"});
  check_rejected(dense + R"({"type": "worker", "index": 1.0}})",
                 {"task.index must be an integer, got 1.0"});
  check_rejected(dense + R"({"type": "worker", "index": "one"}})",
                 {"task.index must be an integer, got \"one\""});
  check_rejected(dense + R"({"type": "worker", "index": " 1"}})", {"must be an integer"});
  check_rejected(dense + R"({"type": "worker", "index": null}})", {"got null"});
  check_rejected(dense + R"({"type": "worker", "index": [0]}})", {"got a list"});
  check_rejected(dense + R"({"type": "worker", "index": -1}})",
                 {"task.index is -1; it must be 0 or more"});
  check_rejected(dense + R"({"type": "worker", "index": "-2"}})",
                 {"task.index is \"-2\"; it must be 0 or more"});
  check_rejected(dense + R"({"type": "worker", "index": 3}})",
                 {"task.index 3 is out of range: cluster.worker has 3 tasks (indices 0 to 2)",
                  "set task.index to this task's position in cluster.worker"});
  check_rejected(dense + R"({"type": "worker", "index": "18446744073709551615"}})",
                 {"task.index \"18446744073709551615\" is out of range"});
  check_rejected(dense + R"({"type": "worker", "index": "99999999999999999999999999"}})",
                 {"is out of range"});
  check_rejected(dense + R"({"type": "worker", "index": 18446744073709551615}})",
                 {"task.index 18446744073709551615 is out of range"});
  check_rejected(R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 1}})",
                 {"cluster.worker has 1 task (index 0)"});

  const std::string sparse = R"({"cluster": {"worker": {"1": "w1:1", "3": "w3:1"}}, "task": )";
  check_rejected(sparse + R"({"type": "worker", "index": 0}})",
                 {"task not in cluster: task.index 0 is not a key of the sparse job "
                  "cluster.worker (its indices are 1, 3)",
                  "set task.index to this task's key in cluster.worker"});
  check_rejected(sparse + R"({"type": "worker", "index": 2000000}})", {"task not in cluster"});
}

TEST_CASE("malformed: \"environment\" that is not a string") {
  check_rejected(R"({"cluster": {"worker": ["w:1"]}, "environment": 1})",
                 {"\"environment\" must be a string, got 1"});
}

// ---- make_tf_config ------------------------------------------------------------------------

TEST_CASE("make_tf_config writes TF_CONFIG that parses back to the same cluster and task") {
  CHECK(make_tf_config(make_spec({{worker(0), "h0:2222"}, {worker(1), "h1:2222"}}), worker(1)) ==
        R"({"cluster":{"worker":["h0:2222","h1:2222"]},"task":{"type":"worker","index":1}})");
  CHECK(
      make_tf_config(make_spec({{worker(3), "h3:1"}, {ps(0), "[::1]:2"}, {chief, "c:3"}}), ps(0)) ==
      R"({"cluster":{"chief":["c:3"],"worker":{"3":"h3:1"},"ps":["[::1]:2"]},)"
      R"("task":{"type":"ps","index":0}})");

  const std::vector<ClusterSpec> specs = {
      make_spec({{worker(0), "localhost:12345"}, {worker(1), "localhost:23456"}}),
      make_spec({{chief, "host0:2222"},
                 {worker(0), "host1:2222"},
                 {worker(1), "host2:2222"},
                 {ps(0), "host4:2222"},
                 {ps(1), "[fe80::1%eth0]:2222"},
                 {evaluator(0), "10.0.0.6:2222"}}),
      make_spec(
          {{worker(1), "w1:1"}, {worker(10), "w10:1"}, {ps(0), "p:1"}, {evaluator(5), "e:1"}}),
      make_spec({{chief, "[::1]:1"}}),
  };
  for (const ClusterSpec& spec : specs) {
    for (const TaskType type : strata::cluster::kTaskTypes) {
      for (const auto& [index, address] : spec.tasks(type)) {
        const Task task{type, index};
        const std::string text = make_tf_config(spec, task);
        CAPTURE(text);
        const TfConfig config = parse_tf_config(text);
        CHECK(config.cluster == spec);
        CHECK(config.task == task);
        CHECK(config.cluster.fingerprint() == spec.fingerprint());
        CHECK(config.cluster.canonical() == spec.canonical());
      }
    }
  }

  // Only tasks of the cluster get a TF_CONFIG.
  for (const auto& [spec, task] : {std::pair{specs[0], worker(2)}, std::pair{ClusterSpec(), chief},
                                   std::pair{specs[1], evaluator(1)}}) {
    try {
      make_tf_config(spec, task);
      FAIL_CHECK("make_tf_config accepted a task outside the cluster");
    } catch (const strata::UsageError& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(e.operation() == "make_tf_config");
      CHECK(contains(message, fmt::format("task not in cluster: {}", task)));
      CHECK(contains(message, "; pass a task of the cluster"));
    }
  }
}

// ---- tf_config_from_environment ------------------------------------------------------------

TEST_CASE("tf_config_from_environment reads TF_CONFIG when it is set and not empty") {
  {
    const ScopedTfConfig env(nullptr);
    CHECK_FALSE(strata::cluster::tf_config_from_environment().has_value());
  }
  {
    const ScopedTfConfig env("");
    CHECK_FALSE(strata::cluster::tf_config_from_environment().has_value());
  }
  {
    const ScopedTfConfig env(std::string(kTutorial).c_str());
    const std::optional<TfConfig> config = strata::cluster::tf_config_from_environment();
    REQUIRE(config.has_value());
    CHECK(*config == parse_tf_config(kTutorial));
    // Read on every call.
    ::setenv("TF_CONFIG",
             R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})", 1);
    CHECK(strata::cluster::tf_config_from_environment()->cluster.num_tasks(TaskType::worker) == 1);
  }
  {
    const ScopedTfConfig env(R"({"cluster": {"master": ["m:1"]}})");
    try {
      strata::cluster::tf_config_from_environment();
      FAIL_CHECK("a bad TF_CONFIG was accepted");
    } catch (const strata::ConfigurationError& e) {
      CHECK(e.operation() == "TF_CONFIG");
      CHECK(contains(e.what(), "unknown job \"master\""));
    }
  }
}

}  // namespace
