// strata/ps/impl/server.ipp — the parameter server's definitions (ps/server.hpp).
//
// The server is a service of the TCP transport (transport/tcp/service_server.hpp): one thread
// handles every request to its end before the next one, so a push is atomic without a lock
// and a pull sees whole pushes only. A push's values are read into the connection's staging
// buffer, checked, and only then applied; a create's straight into the new shard.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/detail/join.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/detail/shard.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/ps/server.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/service_server.hpp>

namespace strata::ps {

namespace detail::server {

inline std::chrono::nanoseconds thread_cpu_time() noexcept {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

}  // namespace detail::server

struct Server::State : transport::tcp::ServiceHandler {
  using Shard = detail::Shard;
  using SessionStep = transport::tcp::SessionStep;
  using ReadPayload = transport::tcp::ReadPayload;
  using SendReply = transport::tcp::SendReply;

  class Session;  // one worker connection's requests (ps/impl/server_session.ipp)

  State(const cluster::ClusterSpec& spec, int ps_index, ServerOptions server_options)
      : cluster(validated(spec, ps_index, server_options)),
        index(ps_index),
        options(std::move(server_options)),
        group_size(spec.collective_size()),
        done_ranks(static_cast<std::size_t>(group_size), false),
        service(cluster.address({cluster::TaskType::ps, ps_index}), "ps::Server",
                {ps_fingerprint(spec), kTunables, group_size, ps_index,
                 options.cluster_token ? options.cluster_token
                                       : environment_variable("STRATA_CLUSTER_TOKEN")},
                *this, options.max_message_bytes, options.timeout) {}

  static const cluster::ClusterSpec& validated(const cluster::ClusterSpec& spec, int ps_index,
                                               const ServerOptions& options) {
    if (!spec.contains({cluster::TaskType::ps, ps_index}))
      throw ConfigurationError(
          -1, "ps::Server",
          fmt::format("ps task {} is not in the cluster ({})", ps_index, spec.canonical()),
          "serve each ps task of the cluster from its own process");
    if (spec.collective_size() < 1)
      throw ConfigurationError(-1, "ps::Server", "the cluster has no chief and no worker to serve",
                               "add the worker tasks to the cluster spec (TF_CONFIG)");
    const auto token = options.cluster_token ? options.cluster_token
                                             : environment_variable("STRATA_CLUSTER_TOKEN");
    if (token && token->empty())
      throw ConfigurationError(-1, "ps::Server", "the cluster token is empty",
                               "set a secret shared by every task, or leave it unset");
    if (options.timeout <= std::chrono::milliseconds::zero())
      throw UsageError(-1, "ps::Server",
                       fmt::format("the timeout {} ms is not positive", options.timeout.count()),
                       "pass a positive ServerOptions::timeout");
    return spec;
  }

  // Inline where declared: a virtual function declared without it and defined inline below
  // would be State's key function, and every unit that includes strata would then emit State's
  // vtable and the whole server behind it, used or not.
  inline std::unique_ptr<transport::tcp::ServiceSession> open(
      int rank, transport::tcp::ServiceReplier replier) override;

  // How long a push waits for the other replicas before its worker hears who held it: a little
  // under the timeout, which is the workers' deadline too when both read STRATA_TIMEOUT.
  std::chrono::milliseconds hold() const {
    return options.timeout - std::min(options.timeout / 10, std::chrono::milliseconds(1000));
  }

  // Answers the waiting pushes `callers` (sessions) of shard `handle`.
  void answer(const std::vector<void*>& callers, std::uint32_t handle);

  void forget(const Session* session) {
    for (Shard& shard : shards)
      detail::forget(shard, session);
  }

  std::string who() const {
    return fmt::format("ps task {} ({})", index,
                       cluster.address({cluster::TaskType::ps, index}).to_string());
  }

  std::optional<std::uint32_t> find(const std::string& name) const {
    const auto it = by_name.find(name);
    if (it == by_name.end()) return std::nullopt;
    return it->second;
  }

  template <class T>
  std::uint32_t create(const std::string& name, const CreateSpec& spec, std::vector<T> initial) {
    Shard shard;
    shard.name = name;
    shard.type = data_type_of<T>;
    shard.update = spec.update;
    shard.elements = spec.elements;
    shard.data = detail::Values<T>{std::move(initial), {}, {}, {}};
    const auto handle = static_cast<std::uint32_t>(shards.size());
    shards.push_back(std::move(shard));
    by_name.emplace(name, handle);
    report.shards = shards.size();
    report.shard_bytes += spec.elements * sizeof(T);
    return handle;
  }

  SessionStep finished(int rank) {
    for (std::size_t handle = 0; handle < shards.size(); ++handle)
      answer(detail::finished(shards[handle], rank), static_cast<std::uint32_t>(handle));
    const auto r = static_cast<std::size_t>(rank);
    if (!done_ranks[r]) {
      done_ranks[r] = true;
      ++done_count;
    }
    SendReply reply;
    reply.then_close = done_count == group_size;
    return reply;
  }

  ServerReport serve() {
    const auto cpu_start = detail::server::thread_cpu_time();
    const auto end = service.serve(options.timeout);
    const auto& stats = service.stats();
    report.requests = stats.requests;
    report.bytes_in = stats.bytes_in;
    report.bytes_out = stats.bytes_out;
    report.refused = stats.refused;
    for (const Shard& shard : shards)
      report.stale_gradients += shard.stale;
    report.cpu_time = detail::server::thread_cpu_time() - cpu_start;
    if (end == transport::tcp::ServiceEnd::idle) {
      std::vector<int> missing;
      for (std::size_t r = 0; r < done_ranks.size(); ++r)
        if (!done_ranks[r]) missing.push_back(static_cast<int>(r));
      throw TimeoutError(
          -1, "ps::Server::serve",
          fmt::format("{} has had no worker connected for {} ms, and rank(s) {} of the "
                      "collective group have not finished",
                      who(), options.timeout.count(), strata::detail::join(missing, ", ")),
          "a worker crashed or was never started: restart the job, or raise the timeout "
          "(ServerOptions::timeout or STRATA_TIMEOUT)");
    }
    return report;
  }

  cluster::ClusterSpec cluster;
  int index;
  ServerOptions options;
  int group_size;
  std::vector<bool> done_ranks;
  int done_count = 0;
  std::vector<Shard> shards;  // the handle is the index
  std::map<std::string, std::uint32_t, std::less<>> by_name;
  ServerReport report;
  transport::shm::HostIdentity host = transport::shm::this_host();  // for attach_region
  transport::tcp::ServiceServer service;  // last: its sessions use the members above
};

}  // namespace strata::ps

#include <strata/ps/impl/server_session.ipp>

namespace strata::ps {

inline std::unique_ptr<transport::tcp::ServiceSession> Server::State::open(
    int rank, transport::tcp::ServiceReplier replier) {
  return std::make_unique<Session>(*this, rank, std::move(replier));
}

inline void Server::State::answer(const std::vector<void*>& callers, std::uint32_t handle) {
  for (void* caller : callers)
    static_cast<Session*>(caller)->release(handle);
}

STRATA_DECL Server::Server(const cluster::ClusterSpec& cluster, int index, ServerOptions options)
    : state_(std::make_unique<State>(cluster, index, std::move(options))) {}

STRATA_DECL Server::~Server() = default;

STRATA_DECL std::uint16_t Server::port() const noexcept {
  return state_->service.port();
}

STRATA_DECL ServerReport Server::serve() {
  return state_->serve();
}

STRATA_DECL void Server::stop() {
  state_->service.stop();
}

}  // namespace strata::ps
