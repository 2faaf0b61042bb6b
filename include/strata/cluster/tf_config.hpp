// strata/cluster/tf_config.hpp — reading and writing TensorFlow's TF_CONFIG.
//
// TF_CONFIG is the JSON document TensorFlow's multi-worker strategies read from the
// environment (the tf.distribute tutorials, Kubeflow's TFJob, Vertex AI and SageMaker set it):
//
//     {"cluster": {"chief":     ["host0:2222"],
//                  "worker":    ["host1:2222", "host2:2222"],
//                  "ps":        ["host3:2222"],
//                  "evaluator": ["host4:2222"]},
//      "task": {"type": "worker", "index": 1},
//      "environment": "cloud", "rpc_layer": "grpc"}
//
// A job is either a list (task i is element i) or, in the sparse form Kubeflow emits when each
// worker should see only itself and the ps tasks, an object from index strings to addresses:
// {"worker": {"3": "host:2222"}}. strata reads both exactly as TF's TFConfigClusterResolver
// does, and rejects what TF would reject (or would misbehave on later) with a
// `ConfigurationError` that names the offending value and says how to fix it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/config.hpp>

namespace strata::cluster {

/// The longest TF_CONFIG accepted (a cluster of 10 000 tasks needs well under 1 MiB).
inline constexpr std::size_t kMaxTfConfigBytes = std::size_t{16} << 20;
/// The deepest nesting of JSON values accepted (a TF_CONFIG needs 3).
inline constexpr int kMaxTfConfigDepth = 32;

/// A parsed TF_CONFIG.
struct TfConfig {
  /// Every task of "cluster".
  ClusterSpec cluster;
  /// This process's task ("task": {"type", "index"}); absent when TF_CONFIG has no "task".
  std::optional<Task> task;
  /// TF's optional "environment" ("cloud", ...); empty when absent or null.
  std::string environment;

  friend bool operator==(const TfConfig&, const TfConfig&) = default;
};

/// Parses a TF_CONFIG document.
///
/// Accepts what TensorFlow accepts: jobs "chief", "worker", "ps", "evaluator" as lists or as
/// sparse objects keyed by index strings ("0", "3"); "task.index" as an integer or a string of
/// digits (TF applies int()); "environment" as a string or null. Other top-level keys
/// ("rpc_layer", ...) are ignored.
///
/// @throws ConfigurationError (rank -1, operation "TF_CONFIG"), and nothing else for any
///   input (std::bad_alloc aside), when: the text is not JSON (the message gives the byte offset),
///   longer than `kMaxTfConfigBytes` or nested deeper than `kMaxTfConfigDepth`; the top level is
///   not an object; "cluster" is missing, not an object or has no job; a job name is unknown
///   ("master" gets a hint: TF2 calls it "chief"); a job is neither a list nor an object, or is
///   empty; an address is not a string or not host:port (see `parse_address`); a sparse index is
///   not a non-negative integer string or above `kMaxTaskIndex`; two tasks share an address (both
///   are named); there is more than one chief; "task" is not an object; task.type is missing,
///   unknown or has no job in the cluster; task.index is missing, not an integer, negative or not a
///   task of that job.
/// Cost: linear in the size of the text; memory proportional to it.
STRATA_DECL TfConfig parse_tf_config(std::string_view json);

/// TF_CONFIG from the environment, parsed; `std::nullopt` when it is unset or empty. Reads the
/// environment on every call (not synchronized with concurrent setenv, like std::getenv).
/// @throws ConfigurationError as `parse_tf_config`.
STRATA_DECL std::optional<TfConfig> tf_config_from_environment();

/// The TF_CONFIG text that tells `task` it is part of `cluster`: a job without holes is
/// written as a list, a sparse job as an object keyed by index strings. Jobs appear in
/// `kTaskTypes` order. `parse_tf_config` reads it back to an equal cluster and task.
/// Example: make_tf_config(spec, {TaskType::worker, 1}) ==
///     R"({"cluster":{"worker":["h0:2222","h1:2222"]},"task":{"type":"worker","index":1}})"
/// @throws UsageError (operation "make_tf_config") if `task` is not in `cluster`.
STRATA_DECL std::string make_tf_config(const ClusterSpec& cluster, Task task);

}  // namespace strata::cluster

#if STRATA_HEADER_ONLY
#include <strata/cluster/impl/tf_config.ipp>
#endif
