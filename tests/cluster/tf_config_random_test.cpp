// Bounded, deterministic random-input test of parse_tf_config through the fuzz target
// (tests/support/fuzz/tf_config.hpp), so that every build checks what the libFuzzer target
// checks: the seed corpus, truncations at every length, random bytes, random mutations of
// valid configs, and a structured generator of valid configs (which must parse to the cluster
// generated) and of invalid ones (which must be refused with ConfigurationError).
#include <strata/cluster/tf_config.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/core/error.hpp>

#include "fuzz/tf_config.hpp"

namespace {

using strata::cluster::ClusterSpec;
using strata::cluster::Task;
using strata::cluster::TaskType;
using strata::cluster::TfConfig;

// SplitMix64: the same sequence on every standard library (std distributions are not).
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (the modulo bias is irrelevant here).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return items[below(items.size())];
  }

 private:
  std::uint64_t state_;
};

void fuzz(std::string_view text) {
  strata::testing::fuzz_tf_config(
      std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

std::filesystem::path corpus_directory() {
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" /
         "tf_config";
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::vector<std::string>& valid_seeds() {
  static const std::vector<std::string> seeds = {
      R"({"cluster": {"worker": ["localhost:12345", "localhost:23456"]}, "task": {"type": "worker", "index": 0}})",
      R"({"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["host4:2222", "host5:2222"], "evaluator": ["host6:2222"]}, "task": {"type": "chief", "index": 0}, "rpc_layer": "grpc"})",
      R"({"cluster":{"worker":{"1":"w-1.ns.svc:2222","3":"w-3.ns.svc:2222"},"ps":["p-0.ns.svc:2222"]},"task":{"type":"worker","index":"3"},"environment":"cloud"})",
      R"({"cluster": {"chief": {"0": "[::1]:1"}, "worker": ["10.0.0.1:2", "[fe80::1%eth0]:3"]}, "task": {"index": 1, "type": "worker"}})",
  };
  return seeds;
}

// ---- the structured generator --------------------------------------------------------------

// A TF_CONFIG as JSON fragments, so that one part can be corrupted before rendering.
struct JobText {
  std::string name;                                        // the key in "cluster"
  bool sparse = false;                                     // object instead of list
  std::vector<std::pair<std::string, std::string>> tasks;  // key (sparse only), raw value
  std::optional<std::string> raw;                          // replaces the whole job
};

struct ConfigText {
  std::vector<JobText> jobs;
  std::optional<std::string> raw_cluster;  // replaces the cluster object
  bool has_cluster = true;
  std::vector<std::pair<std::string, std::string>> task;  // members of "task", raw values
  bool has_task = false;
  std::optional<std::string> raw_task;                     // replaces the task object
  std::vector<std::pair<std::string, std::string>> extra;  // other top-level members
  bool wrap_in_list = false;
  bool drop_last_brace = false;
};

// A JSON string literal for `text`, sometimes writing an ASCII character as \u00XX.
std::string json_string(std::string_view text, Random& random) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (random.chance(3)) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string space(Random& random) {
  static const std::vector<std::string> spaces = {"", "", "", " ", "\n", "  ", "\t", "\r\n "};
  return random.pick(spaces);
}

// Renders members in a random order with random whitespace.
std::string render_object(std::vector<std::pair<std::string, std::string>> members,
                          Random& random) {
  for (std::size_t i = members.size(); i > 1; --i)
    std::swap(members[i - 1], members[random.below(i)]);
  std::string out = "{" + space(random);
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += "," + space(random);
    out += json_string(members[i].first, random) + space(random) + ":" + space(random) +
           members[i].second + space(random);
  }
  return out + "}";
}

std::string render(const ConfigText& config, Random& random) {
  std::vector<std::pair<std::string, std::string>> top = config.extra;
  if (config.has_cluster) {
    std::string cluster;
    if (config.raw_cluster) {
      cluster = *config.raw_cluster;
    } else {
      std::vector<std::pair<std::string, std::string>> jobs;
      for (const JobText& job : config.jobs) {
        std::string value;
        if (job.raw) {
          value = *job.raw;
        } else if (job.sparse) {
          value = render_object(job.tasks, random);
        } else {
          value = "[" + space(random);
          for (std::size_t i = 0; i < job.tasks.size(); ++i) {
            if (i > 0) value += "," + space(random);
            value += job.tasks[i].second;
          }
          value += space(random) + "]";
        }
        jobs.emplace_back(job.name, value);
      }
      cluster = render_object(jobs, random);
    }
    top.emplace_back("cluster", cluster);
  }
  if (config.has_task)
    top.emplace_back("task",
                     config.raw_task ? *config.raw_task : render_object(config.task, random));
  std::string text = space(random) + render_object(top, random) + space(random);
  if (config.wrap_in_list) text = "[" + text + "]";
  if (config.drop_last_brace) text.erase(text.rfind('}'), 1);
  return text;
}

std::string random_host(Random& random) {
  switch (random.below(6)) {
    case 0:
      return fmt::format("w{}.example.com", random.below(1000));
    case 1:
      return fmt::format("tfjob-worker-{}.default.svc", random.below(1000));
    case 2:
      return fmt::format("10.{}.{}.{}", random.below(256), random.below(256), random.below(256));
    case 3:
      return fmt::format("[fd00::{:x}]", random.below(0x10000));
    case 4:
      return fmt::format("[2001:db8:{:x}::{:x}%eth{}]", random.below(0x10000),
                         random.below(0x10000), random.below(4));
    default:
      return random.chance(50) ? "localhost" : "[::1]";
  }
}

struct Generated {
  ConfigText text;
  ClusterSpec cluster;
  std::optional<Task> task;
  std::string environment;
};

// A random valid TF_CONFIG and what it must parse to.
Generated generate_valid(Random& random) {
  Generated out;
  std::set<std::string> used;
  const std::array<int, 4> include_percent = {50, 85, 40, 25};  // chief, worker, ps, evaluator
  std::vector<Task> tasks;
  for (const TaskType type : strata::cluster::kTaskTypes) {
    const auto type_index = static_cast<std::size_t>(type);
    if (!random.chance(include_percent[type_index])) continue;
    JobText job;
    job.name = std::string(to_string(type));
    const std::size_t count = type == TaskType::chief ? 1 : 1 + random.below(6);
    job.sparse = random.chance(30);
    std::vector<int> indices;
    if (job.sparse && type != TaskType::chief) {
      std::set<int> chosen;
      while (chosen.size() < count)
        chosen.insert(static_cast<int>(random.below(20)));
      indices.assign(chosen.begin(), chosen.end());
    } else {
      for (std::size_t i = 0; i < count; ++i)
        indices.push_back(static_cast<int>(i));
    }
    for (const int index : indices) {
      std::string address;
      do {
        address = fmt::format("{}:{}", random_host(random), 1 + random.below(65535));
      } while (!used.insert(address).second);
      std::string key = std::to_string(index);
      if (random.chance(5)) key = "0" + key;  // "03" is task 3, as int("03") in TF
      job.tasks.emplace_back(key, json_string(address, random));
      out.cluster.add(Task{type, index}, strata::cluster::parse_address(address));
      tasks.push_back(Task{type, index});
    }
    out.text.jobs.push_back(std::move(job));
  }
  if (tasks.empty()) {
    JobText job{"worker", false, {{"0", "\"w:1\""}}, std::nullopt};
    out.text.jobs.push_back(job);
    out.cluster.add(Task{TaskType::worker, 0}, {"w", 1});
    tasks.push_back(Task{TaskType::worker, 0});
  }
  if (random.chance(80)) {
    const Task task = tasks[random.below(tasks.size())];
    out.task = task;
    out.text.has_task = true;
    out.text.task.emplace_back("type", fmt::format("\"{}\"", task.type));
    out.text.task.emplace_back("index", random.chance(30) ? fmt::format("\"{}\"", task.index)
                                                          : std::to_string(task.index));
  }
  if (random.chance(30)) {
    out.environment = random.chance(50) ? "cloud" : "google";
    out.text.extra.emplace_back("environment", json_string(out.environment, random));
  } else if (random.chance(10)) {
    out.text.extra.emplace_back("environment", "null");
  }
  if (random.chance(30)) out.text.extra.emplace_back("rpc_layer", "\"grpc\"");
  if (random.chance(10))
    out.text.extra.emplace_back("extra", R"({"a": [1, 2.5, null, {"b": []}]})");
  return out;
}

// One corruption that makes a valid TF_CONFIG invalid. Returns false when it does not apply.
bool corrupt(Generated& config, Random& random) {
  ConfigText& text = config.text;
  JobText& job = text.jobs[random.below(text.jobs.size())];
  static const std::vector<std::string> bad_values = {"123", "null", "[]", "{}", "true", "1.5"};
  static const std::vector<std::string> bad_addresses = {
      "\"host\"",       "\"host:\"", "\"host:0\"", "\"host:65536\"", "\":80\"", "\"h st:1\"",
      "\"::1:80\"",     "\"[::1]\"", "\"[x]:1\"",  "\"h:1:2\"",      "\"\"",    "\"-h:1\"",
      "\"h:99999999\"", "\"h:-1\"",  "\"a..b:1\"", "\"h/p:1\""};
  switch (random.below(16)) {
    case 0:
      job.name =
          random.pick(std::vector<std::string>{"master", "Worker", "workers", "", "PS", "x"});
      return true;
    case 1:
      job.raw = random.pick(std::vector<std::string>{"5", "\"w:1\"", "null", "true", "-1"});
      return true;
    case 2:
      job.raw = random.chance(50) ? "[]" : "{}";
      return true;
    case 3:
      job.tasks[random.below(job.tasks.size())].second = random.pick(bad_values);
      return true;
    case 4:
      job.tasks[random.below(job.tasks.size())].second = random.pick(bad_addresses);
      return true;
    case 5:
      if (!job.sparse) return false;
      job.tasks[random.below(job.tasks.size())].first =
          random.pick(std::vector<std::string>{"-1", "x", "", "1.5", "1000001", " 1", "+1"});
      return true;
    case 6: {  // a second task at an address already used
      std::vector<std::pair<std::string, std::string>*> all;
      for (JobText& j : text.jobs)
        for (auto& task : j.tasks)
          all.push_back(&task);
      if (all.size() < 2) return false;
      const std::size_t a = random.below(all.size());
      std::size_t b = random.below(all.size() - 1);
      if (b >= a) ++b;
      all[b]->second = all[a]->second;
      return true;
    }
    case 7: {  // a second chief
      for (JobText& j : text.jobs) {
        if (j.name != "chief") continue;
        j.tasks.emplace_back("1", "\"second-chief:1\"");
        return true;
      }
      text.jobs.push_back(JobText{"chief", false, {{"0", "\"c0:7\""}, {"1", "\"c1:7\""}}, {}});
      return true;
    }
    case 8:
      text.has_task = true;
      text.raw_task = random.pick(std::vector<std::string>{"5", "\"worker\"", "[]", "null"});
      return true;
    case 9: {  // task.type missing, unknown, or a job the cluster lacks
      text.has_task = true;
      const std::size_t variant = random.below(3);
      std::string index = "0";
      if (variant == 2) {
        for (const TaskType type : strata::cluster::kTaskTypes) {
          if (config.cluster.num_tasks(type) == 0) {
            text.task = {{"type", fmt::format("\"{}\"", type)}, {"index", index}};
            return true;
          }
        }
        return false;
      }
      text.task = {{"index", index}};
      if (variant == 1) text.task.emplace_back("type", "\"master\"");
      return true;
    }
    case 10: {  // task.index missing, not an integer, negative or out of range
      if (!text.has_task) return false;
      std::erase_if(text.task, [](const auto& member) { return member.first == "index"; });
      if (random.chance(20)) return true;  // missing
      text.task.emplace_back("index",
                             random.pick(std::vector<std::string>{
                                 "1.5", "-1", "\"-1\"", "\"x\"", "null", "[0]", "1000001",
                                 "\"99999999999999999999\"", "18446744073709551615", "true"}));
      return true;
    }
    case 11:
      text.wrap_in_list = true;
      return true;
    case 12:
      text.has_cluster = false;
      return true;
    case 13:
      text.raw_cluster = random.pick(std::vector<std::string>{"{}", "[]", "null", "\"w:1\""});
      return true;
    case 14:
      // JSON keeps the last of duplicate keys: remove the valid one first.
      std::erase_if(text.extra, [](const auto& member) { return member.first == "environment"; });
      text.extra.emplace_back("environment",
                              random.pick(std::vector<std::string>{"1", "[]", "{}"}));
      return true;
    default:
      text.drop_last_brace = true;
      return true;
  }
}

// ---- the tests -----------------------------------------------------------------------------

TEST_CASE("every file of the seed corpus passes through the fuzz target") {
  const std::filesystem::path directory = corpus_directory();
  REQUIRE(std::filesystem::is_directory(directory));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const std::string text = read_file(entry.path());
    CAPTURE(name);
    fuzz(text);
    ++files;
    // The file names say what each seed is.
    if (name.starts_with("valid_")) {
      CHECK_NOTHROW(strata::cluster::parse_tf_config(text));
    } else if (name.starts_with("invalid_")) {
      CHECK_THROWS_AS(strata::cluster::parse_tf_config(text), strata::ConfigurationError);
    }
  }
  CHECK(files >= 10);
}

TEST_CASE("truncations of valid configs at every length") {
  for (const std::string& seed : valid_seeds()) {
    CHECK_NOTHROW(strata::cluster::parse_tf_config(seed));
    for (std::size_t length = 0; length <= seed.size(); ++length) {
      fuzz(std::string_view(seed).substr(0, length));
      fuzz(std::string_view(seed).substr(length));  // and what the cut leaves behind
    }
  }
}

TEST_CASE("random bytes") {
  Random random(0x5eed0001);
  const std::string_view json_alphabet = R"({}[]":,0123456789-.eE+ \ntrufalsn chiefworkpsvaludx)";
  for (int i = 0; i < 4000; ++i) {
    std::string text(random.below(300), '\0');
    const bool json_like = random.chance(60);
    for (char& c : text) {
      c = json_like ? json_alphabet[random.below(json_alphabet.size())]
                    : static_cast<char>(random.below(256));
    }
    fuzz(text);
  }
}

TEST_CASE("random mutations of valid configs") {
  Random random(0x5eed0002);
  static const std::vector<std::string> tokens = {"{",
                                                  "}",
                                                  "[",
                                                  "]",
                                                  "\"",
                                                  ",",
                                                  ":",
                                                  "-1",
                                                  "1e309",
                                                  "null",
                                                  "true",
                                                  "0",
                                                  "\\",
                                                  "\\u0000",
                                                  "\"\"",
                                                  "[[[[",
                                                  "}}}}",
                                                  "\"chief\"",
                                                  "\"worker\"",
                                                  "\"ps\"",
                                                  "\"evaluator\"",
                                                  "\"master\"",
                                                  "{}",
                                                  "[]",
                                                  "99999999999999999999",
                                                  "\"index\"",
                                                  "\"type\"",
                                                  ":0",
                                                  ":65536",
                                                  "::1",
                                                  "\xff",
                                                  "\xc3\xa9"};
  int accepted = 0;
  for (int i = 0; i < 8000; ++i) {
    std::string text = random.pick(valid_seeds());
    const std::size_t mutations = 1 + random.below(4);
    for (std::size_t m = 0; m < mutations; ++m) {
      const std::size_t at = random.below(text.size() + 1);
      switch (random.below(7)) {
        case 0:  // bit flip
          if (at < text.size()) text[at] = static_cast<char>(text[at] ^ (1 << random.below(8)));
          break;
        case 1:  // remove characters
          text.erase(at, 1 + random.below(3));
          break;
        case 2:  // duplicate a character
          if (at < text.size()) text.insert(at, 1, text[at]);
          break;
        case 3:  // insert a token
          text.insert(at, random.pick(tokens));
          break;
        case 4:  // replace with a token
          text.replace(at, random.below(4), random.pick(tokens));
          break;
        case 5:  // truncate
          text.resize(at);
          break;
        default:  // swap two characters
          if (!text.empty())
            std::swap(text[random.below(text.size())], text[random.below(text.size())]);
          break;
      }
    }
    fuzz(text);
    try {
      strata::cluster::parse_tf_config(text);
      ++accepted;
    } catch (const strata::ConfigurationError&) {
    }
  }
  // Both sides of the parser are exercised.
  CHECK(accepted > 100);
  CHECK(accepted < 7900);
}

TEST_CASE("structured generator: valid configs parse to the cluster generated") {
  Random random(0x5eed0003);
  for (int i = 0; i < 4000; ++i) {
    const Generated generated = generate_valid(random);
    const std::string text = render(generated.text, random);
    TfConfig config;
    try {
      config = strata::cluster::parse_tf_config(text);
    } catch (const strata::ConfigurationError& e) {
      CAPTURE(text);
      FAIL(e.what());
    }
    if (config.cluster != generated.cluster || config.task != generated.task ||
        config.environment != generated.environment) {
      CAPTURE(text);
      CAPTURE(config.cluster.canonical());
      CAPTURE(generated.cluster.canonical());
      FAIL("parsed a different config");
    }
    fuzz(text);
  }
}

TEST_CASE("structured generator: invalid configs are refused with ConfigurationError") {
  Random random(0x5eed0004);
  int refused = 0;
  for (int i = 0; i < 4000; ++i) {
    Generated generated = generate_valid(random);
    while (!corrupt(generated, random)) {
    }
    const std::string text = render(generated.text, random);
    try {
      strata::cluster::parse_tf_config(text);
      CAPTURE(text);
      FAIL("an invalid TF_CONFIG was accepted");
    } catch (const strata::ConfigurationError& e) {
      if (!std::string_view(e.what()).starts_with("strata: TF_CONFIG: ")) FAIL(e.what());
      ++refused;
    }
    fuzz(text);
  }
  CHECK(refused == 4000);
}

}  // namespace
