// strata/coordinator/impl/cluster_coordinator.ipp — the coordinator's definitions
// (coordinator/cluster_coordinator.hpp), over its core (coordinator_core.ipp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/resolve.hpp>
#include <strata/coordinator/cluster_coordinator.hpp>
#include <strata/coordinator/impl/coordinator_core.ipp>
#include <strata/core/error.hpp>

namespace strata::coordinator::detail {

STRATA_DECL std::span<const std::byte> closure_result(const ClosureState& closure) {
  return closure.core->result(closure);
}

STRATA_DECL bool closure_finished(const ClosureState& closure) {
  return closure.core->finished(closure);
}

}  // namespace strata::coordinator::detail

namespace strata::coordinator {

STRATA_DECL ClusterCoordinator::ClusterCoordinator(CoordinatorOptions options) {
  const cluster::ResolvedCluster resolved = cluster::resolve_cluster();
  if (resolved.task.type != cluster::TaskType::chief)
    throw ConfigurationError(
        resolved.rank, "ClusterCoordinator",
        fmt::format("this task is {} {}, not the chief", resolved.task.type, resolved.task.index),
        "create the coordinator on the chief task; call serve_if_worker "
        "on the workers and serve_if_ps on the ps tasks");
  core_ = std::make_shared<detail::CoordinatorCore>(resolved.cluster, std::move(options));
  core_->start();
}

STRATA_DECL ClusterCoordinator::ClusterCoordinator(const cluster::ClusterSpec& cluster,
                                                   CoordinatorOptions options)
    : core_(std::make_shared<detail::CoordinatorCore>(cluster, std::move(options))) {
  core_->start();
}

STRATA_DECL ClusterCoordinator::~ClusterCoordinator() {
  core_->shutdown();
}

STRATA_DECL void ClusterCoordinator::join() {
  core_->join();
}

STRATA_DECL bool ClusterCoordinator::done() {
  return core_->done();
}

STRATA_DECL void ClusterCoordinator::shutdown() {
  core_->shutdown();
}

STRATA_DECL int ClusterCoordinator::num_workers() const noexcept {
  return core_->num_workers();
}

STRATA_DECL CoordinatorReport ClusterCoordinator::report() const {
  return core_->report();
}

STRATA_DECL std::shared_ptr<const detail::ClosureState> ClusterCoordinator::schedule_bytes(
    std::string_view name, std::uint64_t signature, std::vector<std::byte> args) {
  return core_->schedule(name, signature, std::move(args));
}

STRATA_DECL std::uint64_t ClusterCoordinator::add_resource_bytes(std::string_view name,
                                                                 std::uint64_t signature,
                                                                 std::vector<std::byte> args) {
  return core_->add_resource(name, signature, std::move(args));
}

}  // namespace strata::coordinator
