// strata/cluster/impl/tf_config.ipp — TF_CONFIG's parser and writer, over nlohmann::json.
// Included at the end of cluster/tf_config.hpp (header-only) or by impl/src.hpp after it
// (compiled), never on its own.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>

namespace strata::cluster {

namespace detail::tf {

using namespace detail::spec;  // quote_text, describe_cluster, address_problem, ...

inline constexpr std::string_view kTfConfig = "TF_CONFIG";
inline constexpr std::string_view kTfConfigExample =
    R"(e.g. {"cluster": {"worker": ["host0:2222", "host1:2222"]}, )"
    R"("task": {"type": "worker", "index": 0}})";

[[noreturn]] inline void tf_config_error(const std::string& what_happened,
                                         std::string_view what_to_do) {
  throw ConfigurationError(-1, kTfConfig, what_happened, what_to_do);
}

// A short description of a JSON value for messages: scalars by value, containers by kind.
// Never dumps containers: they may be huge or deeply nested (dump() recurses).
inline std::string describe_json(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::string:
      return quote_text(value.get_ref<const std::string&>(), '"');
    case nlohmann::json::value_t::number_integer:
      return fmt::format("{}", value.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return fmt::format("{}", value.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: {
      // fmt writes 1.0 as "1"; keep it recognizable as the non-integer it is.
      std::string text = fmt::format("{}", value.get<double>());
      if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
      return text;
    }
    case nlohmann::json::value_t::boolean:
      return value.get<bool>() ? "true" : "false";
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "a list";
    default:
      return std::string(value.type_name());
  }
}

// nlohmann's message without its "[json.exception.parse_error.101] " prefix, escaped and cut.
inline std::string json_error_text(const nlohmann::json::exception& error) {
  std::string_view text = error.what();
  if (text.starts_with("[json.exception.")) {
    if (const std::size_t end = text.find("] "); end != std::string_view::npos)
      text.remove_prefix(end + 2);
  }
  return escaped(text, 240);
}

// The advice for a job name that is not one of the four.
inline std::string unknown_job_hint(std::string_view name) {
  std::string lower(name.substr(0, 16));
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  if (lower == "master")
    return "TF2 calls the coordinating task \"chief\": rename \"master\" to \"chief\"";
  if (name.size() <= 16 && parse_task_type(lower))
    return fmt::format("job names are lower case: write \"{}\"", lower);
  return "use only the jobs \"chief\", \"worker\", \"ps\" and \"evaluator\"";
}

inline constexpr std::string_view kAddressHintTf =
    "write each address as a string \"host:port\", e.g. \"worker-0.example.com:2222\", "
    "\"10.0.0.1:2222\" or \"[::1]:2222\"";

// Adds one task read from `value` (at JSON path `path`) to `spec`, with TF_CONFIG messages.
inline void add_tf_config_task(ClusterSpec& spec, Task task, const nlohmann::json& value,
                               const std::string& path) {
  if (!value.is_string())
    tf_config_error(fmt::format("{} must be an address string, got {}", path, describe_json(value)),
                    kAddressHintTf);
  const auto& text = value.get_ref<const std::string&>();
  Address address;
  if (std::string problem = address_problem(text, address); !problem.empty())
    tf_config_error(
        fmt::format("{}: cannot use {} as an address: {}", path, quote_text(text), problem),
        kAddressHintTf);
  if (spec.contains(task))
    tf_config_error(fmt::format("{}: {} {} is listed twice (index keys such as \"1\" and \"01\" "
                                "name the same task)",
                                path, to_string(task.type), task.index),
                    "list each task once");
  if (const auto other = spec.find(address))
    tf_config_error(
        fmt::format("duplicate address {}: both {} {} and {} {} ({}) use it", quote_text(text),
                    to_string(other->type), other->index, to_string(task.type), task.index, path),
        "give every task its own host:port");
  spec.add(task, std::move(address));
}

// The index a sparse job's key names: digits only, at most kMaxTaskIndex.
inline int sparse_index(std::string_view job, std::string_view key) {
  const std::string path = fmt::format("cluster.{}[{}]", job, quote_text(key, '"'));
  if (!all_digits(key))
    tf_config_error(
        fmt::format("{}: the key {} is not a task index (a non-negative integer)", path,
                    quote_text(key, '"')),
        R"(key the tasks of a sparse job by their index, e.g. {"worker": {"0": "host:2222"}})");
  int index = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
  if (ec != std::errc() || index > kMaxTaskIndex)
    tf_config_error(fmt::format("{}: the task index is above the limit of {}", path, kMaxTaskIndex),
                    "number the tasks of a job from 0, without large gaps");
  return index;
}

inline void parse_job(ClusterSpec& spec, std::string_view name, const nlohmann::json& job,
                      bool& sparse) {
  const std::optional<TaskType> type = parse_task_type(name);
  if (!type)
    tf_config_error(fmt::format("unknown job {} in cluster", quote_text(name, '"')),
                    unknown_job_hint(name));
  if (!job.is_array() && !job.is_object())
    tf_config_error(fmt::format("cluster.{} must be a list of addresses or an object from task "
                                "index to address, got {}",
                                name, describe_json(job)),
                    R"(write e.g. "worker": ["host0:2222", "host1:2222"] or )"
                    R"("worker": {"1": "host1:2222"})");
  if (job.empty())
    tf_config_error(fmt::format("cluster.{} is empty", name),
                    "list at least one address, or leave the job out");
  if (*type == TaskType::chief && job.size() > 1)
    tf_config_error(fmt::format("more than one chief: cluster.chief has {} tasks", job.size()),
                    "a cluster has at most one chief; list the other tasks under \"worker\"");
  sparse = job.is_object();
  if (job.is_array()) {
    if (job.size() > static_cast<std::size_t>(kMaxTaskIndex) + 1)
      tf_config_error(fmt::format("cluster.{} has {} tasks, more than the limit of {}", name,
                                  job.size(), kMaxTaskIndex + 1),
                      "split the job or check that TF_CONFIG holds what you meant");
    int index = 0;
    for (const auto& value : job) {
      add_tf_config_task(spec, Task{*type, index}, value,
                         fmt::format("cluster.{}[{}]", name, index));
      ++index;
    }
    return;
  }
  for (auto it = job.begin(); it != job.end(); ++it) {
    const int index = sparse_index(name, it.key());
    if (*type == TaskType::chief && index != 0)
      tf_config_error(
          fmt::format("cluster.chief[{}]: the chief is always task 0", quote_text(it.key(), '"')),
          R"(key the chief "0", or write "chief": ["host:2222"])");
    add_tf_config_task(spec, Task{*type, index}, it.value(),
                       fmt::format("cluster.{}[{}]", name, quote_text(it.key(), '"')));
  }
}

// task.index: an integer or a string of digits, 0 or more. Returns the value (saturated far
// above kMaxTaskIndex, which only needs to compare as out of range) and its text.
inline std::pair<std::uint64_t, std::string> task_index(const nlohmann::json& value) {
  auto not_integer = [&]() {
    tf_config_error(fmt::format("task.index must be an integer, got {}", describe_json(value)),
                    R"(set "index" to this task's position in its job, e.g. "index": 0)");
  };
  auto negative = [&](std::string_view text) {
    tf_config_error(fmt::format("task.index is {}; it must be 0 or more", text),
                    R"(set "index" to this task's position in its job, from 0)");
  };
  if (value.is_number_unsigned()) {
    const auto index = value.get<std::uint64_t>();
    return {index, fmt::format("{}", index)};
  }
  if (value.is_number_integer()) {
    const auto index = value.get<std::int64_t>();
    if (index < 0) negative(fmt::format("{}", index));
    return {static_cast<std::uint64_t>(index), fmt::format("{}", index)};
  }
  if (!value.is_string()) not_integer();
  const std::string_view text = value.get_ref<const std::string&>();
  if (text.starts_with('-') && all_digits(text.substr(1))) negative(quote_text(text, '"'));
  if (!all_digits(text)) not_integer();
  std::uint64_t index = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  if (ec != std::errc()) index = UINT64_MAX;  // too many digits: certainly out of range
  return {index, quote_text(text, '"')};
}

inline Task parse_task(const nlohmann::json& task, const ClusterSpec& cluster,
                       const std::array<bool, std::size(kTaskTypes)>& sparse) {
  if (!task.is_object())
    tf_config_error(fmt::format("\"task\" must be an object, got {}", describe_json(task)),
                    R"(write e.g. "task": {"type": "worker", "index": 0}, or leave it out)");
  const auto type_it = task.find("type");
  if (type_it == task.end())
    tf_config_error("task.type is missing",
                    R"(set "type" to this task's job: "chief", "worker", "ps" or "evaluator")");
  if (!type_it->is_string())
    tf_config_error(fmt::format("task.type must be a string, got {}", describe_json(*type_it)),
                    R"(set "type" to this task's job: "chief", "worker", "ps" or "evaluator")");
  const auto& type_name = type_it->get_ref<const std::string&>();
  const std::optional<TaskType> type = parse_task_type(type_name);
  if (!type)
    tf_config_error(fmt::format("unknown task.type {}", quote_text(type_name, '"')),
                    unknown_job_hint(type_name));
  const auto& job = cluster.tasks(*type);
  if (job.empty())
    tf_config_error(fmt::format("task not in cluster: task.type is \"{}\" but the cluster has no "
                                "\"{}\" job (it has {})",
                                *type, *type, describe_cluster(cluster)),
                    "add this task's job to the cluster, or fix task.type");

  const auto index_it = task.find("index");
  if (index_it == task.end())
    tf_config_error("task.index is missing",
                    R"(set "index" to this task's position in its job, e.g. "index": 0)");
  const auto [index, index_text] = task_index(*index_it);
  if (!sparse[static_cast<std::size_t>(*type)]) {
    if (index >= job.size())
      tf_config_error(
          fmt::format("task.index {} is out of range: cluster.{} has {}", index_text, *type,
                      job.size() == 1
                          ? std::string("1 task (index 0)")
                          : fmt::format("{} tasks (indices 0 to {})", job.size(), job.size() - 1)),
          fmt::format("set task.index to this task's position in cluster.{}", *type));
  } else if (index > static_cast<std::uint64_t>(kMaxTaskIndex) ||
             !job.contains(static_cast<int>(index))) {
    tf_config_error(fmt::format("task not in cluster: task.index {} is not a key of the sparse job "
                                "cluster.{} (its indices are {})",
                                index_text, *type, describe_indices(job)),
                    fmt::format("set task.index to this task's key in cluster.{}", *type));
  }
  return Task{*type, static_cast<int>(index)};
}

}  // namespace detail::tf

STRATA_DECL TfConfig parse_tf_config(std::string_view json) {
  using detail::tf::tf_config_error;
  if (json.size() > kMaxTfConfigBytes)
    tf_config_error(fmt::format("the text is {} bytes long, more than the limit of {}", json.size(),
                                kMaxTfConfigBytes),
                    "check that TF_CONFIG holds a cluster description and nothing else");
  nlohmann::json root;
  try {
    // A depth cap: nested brackets cost memory per level (16 MiB of '[' took 1.2 GB).
    root = nlohmann::json::parse(
        json.data(), json.data() + json.size(),
        [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxTfConfigDepth)
            tf_config_error(fmt::format("values nest deeper than {} levels", kMaxTfConfigDepth),
                            "a TF_CONFIG nests three levels deep: " +
                                std::string(detail::tf::kTfConfigExample));
          return true;
        });
  } catch (const nlohmann::json::parse_error& error) {
    tf_config_error(fmt::format("not valid JSON: syntax error at byte {}: {}", error.byte,
                                detail::tf::json_error_text(error)),
                    "fix the JSON (quotes, commas, braces; a shell may have eaten the quotes), " +
                        std::string(detail::tf::kTfConfigExample));
  } catch (const nlohmann::json::exception& error) {
    tf_config_error(fmt::format("not valid JSON: {}", detail::tf::json_error_text(error)),
                    "fix the JSON, " + std::string(detail::tf::kTfConfigExample));
  }
  if (!root.is_object())
    tf_config_error(
        fmt::format("the top level must be an object, got {}", detail::tf::describe_json(root)),
        "write TF_CONFIG as one JSON object, " + std::string(detail::tf::kTfConfigExample));

  TfConfig config;
  const auto cluster_it = root.find("cluster");
  if (cluster_it == root.end())
    tf_config_error("there is no \"cluster\" (keys are case sensitive)",
                    "describe the cluster, " + std::string(detail::tf::kTfConfigExample));
  if (!cluster_it->is_object())
    tf_config_error(fmt::format("\"cluster\" must be an object from job names to addresses, got {}",
                                detail::tf::describe_json(*cluster_it)),
                    "describe the cluster, " + std::string(detail::tf::kTfConfigExample));
  if (cluster_it->empty())
    tf_config_error("\"cluster\" has no jobs",
                    "list the tasks of the cluster, " + std::string(detail::tf::kTfConfigExample));
  std::array<bool, std::size(kTaskTypes)> sparse{};
  for (auto it = cluster_it->begin(); it != cluster_it->end(); ++it) {
    bool job_sparse = false;
    detail::tf::parse_job(config.cluster, it.key(), it.value(), job_sparse);
    // parse_job accepted the name, so it is a TaskType.
    sparse[static_cast<std::size_t>(*parse_task_type(it.key()))] = job_sparse;
  }

  if (const auto task_it = root.find("task"); task_it != root.end())
    config.task = detail::tf::parse_task(*task_it, config.cluster, sparse);

  if (const auto env_it = root.find("environment"); env_it != root.end()) {
    if (env_it->is_string()) {
      config.environment = env_it->get<std::string>();
    } else if (!env_it->is_null()) {
      tf_config_error(fmt::format("\"environment\" must be a string, got {}",
                                  detail::tf::describe_json(*env_it)),
                      R"(write e.g. "environment": "cloud", or leave it out)");
    }
  }
  return config;
}

STRATA_DECL std::optional<TfConfig> tf_config_from_environment() {
  const auto text = environment_variable("TF_CONFIG");
  if (!text) return std::nullopt;
  return parse_tf_config(*text);
}

STRATA_DECL std::string make_tf_config(const ClusterSpec& cluster, Task task) {
  if (!cluster.contains(task))
    throw UsageError(
        -1, "make_tf_config",
        fmt::format("task not in cluster: {} {} (the cluster has {})", to_string(task.type),
                    task.index, detail::spec::describe_cluster(cluster)),
        "pass a task of the cluster");
  // ordered_json keeps TF's usual key order ("type" before "index", jobs as listed).
  nlohmann::ordered_json jobs = nlohmann::ordered_json::object();
  for (const TaskType type : kTaskTypes) {
    const auto& tasks = cluster.tasks(type);
    if (tasks.empty()) continue;
    const bool dense = tasks.rbegin()->first == static_cast<int>(tasks.size()) - 1;
    nlohmann::ordered_json job =
        dense ? nlohmann::ordered_json::array() : nlohmann::ordered_json::object();
    for (const auto& [index, address] : tasks) {
      if (dense) {
        job.push_back(address.to_string());
      } else {
        job[std::to_string(index)] = address.to_string();
      }
    }
    jobs[std::string(to_string(type))] = std::move(job);
  }
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  root["cluster"] = std::move(jobs);
  nlohmann::ordered_json task_json = nlohmann::ordered_json::object();
  task_json["type"] = std::string(to_string(task.type));
  task_json["index"] = task.index;
  root["task"] = std::move(task_json);
  return root.dump();
}

}  // namespace strata::cluster
