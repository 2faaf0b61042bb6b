// strata/coordinator/impl/worker_server.ipp — a worker's server's definitions
// (coordinator/worker_server.hpp).
//
// The server is a service of the TCP transport (transport/tcp/service_server.hpp); a function
// runs on its one thread, between reading its request and writing the reply, so a worker runs
// one function at a time, as a TF worker runs one closure at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/coordinator/protocol.hpp>
#include <strata/coordinator/worker_server.hpp>
#include <strata/core/environment.hpp>
#include <strata/core/error.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/growing_payload.hpp>
#include <strata/transport/tcp/service_server.hpp>

namespace strata::coordinator {

struct WorkerServer::State : transport::tcp::ServiceHandler {
  using SessionStep = transport::tcp::SessionStep;
  using SendReply = transport::tcp::SendReply;

  // One coordinator connection's requests, one at a time.
  class Session : public transport::tcp::ServiceSession {
   public:
    explicit Session(State& state) : state_(state) {}

    SessionStep on_request(const transport::tcp::FrameHeader& request) override {
      kind_ = static_cast<std::uint8_t>(request.kind);
      if (kind_ < static_cast<std::uint8_t>(Operation::run) ||
          kind_ > static_cast<std::uint8_t>(Operation::abort))
        return fail(UsageError(state_.worker.rank(), "WorkerServer",
                               fmt::format("unknown operation {}", kind_),
                               "run the same strata version on every task"));
      payload_bytes_ = request.payload_bytes;
      payload_.clear();
      return on_payload();
    }

    // The payload arrives into a buffer that grows with what has come: a request that claims
    // gigabytes costs memory only as its bytes arrive.
    SessionStep on_payload() override {
      const auto next = transport::tcp::grow_toward(payload_, payload_bytes_);
      if (next.empty()) return on_complete_request();
      return transport::tcp::ReadPayload{{next}};
    }

   private:
    SessionStep on_complete_request() {
      if (static_cast<Operation>(kind_) == Operation::done) {
        SendReply reply;
        reply.then_close = true;
        return reply;
      }
      try {
        Reader reader(payload_);
        const RequestPrefix prefix = decode_prefix(reader);
        const auto args = std::span(payload_).subspan(payload_.size() - reader.left());
        if (static_cast<Operation>(kind_) == Operation::abort) return on_abort(args);
        const Functions::Entry* entry = state_.functions.find(prefix.name);
        const bool build = static_cast<Operation>(kind_) == Operation::build;
        if (entry == nullptr || entry->resource != build)
          throw UsageError(state_.worker.rank(), "WorkerServer",
                           fmt::format("worker {} has no {} named '{}'", state_.worker.index(),
                                       build ? "resource function" : "function", prefix.name),
                           "register the same functions on every task, before serving");
        if (entry->signature != prefix.signature)
          throw MismatchError(state_.worker.rank(), "WorkerServer",
                              fmt::format("'{}' takes other types on worker {} than on the "
                                          "coordinator",
                                          prefix.name, state_.worker.index()),
                              "run the same program on every task");
        return build ? on_build(*entry, prefix, args) : on_run(*entry, prefix, args);
      } catch (...) {
        ++state_.report.functions_failed;
        return fail_current();
      }
    }

    // The coordinator failed for good: serve() ends raising its error, so that an idle worker
    // learns of a lost ps task as a busy one does.
    SessionStep on_abort(std::span<const std::byte> args) {
      const RemoteError error = decode_error(args);
      RootCause cause{error.rank, error.what};
      state_.aborted = error.kind == RemoteError::Kind::timeout
                           ? std::make_exception_ptr(TimeoutError(
                                 state_.worker.rank(), "WorkerServer::serve", std::move(cause)))
                           : std::make_exception_ptr(PeerFailureError(
                                 state_.worker.rank(), "WorkerServer::serve", std::move(cause)));
      reply_bytes_.clear();
      SendReply reply = ok();
      reply.then_close = true;
      return reply;
    }

    SessionStep on_run(const Functions::Entry& entry, const RequestPrefix& prefix,
                       std::span<const std::byte> args) {
      state_.worker.set_closure_id(prefix.id);
      reply_bytes_ = entry.invoke(state_.worker, args);
      ++state_.report.functions_run;
      return ok();
    }

    SessionStep on_build(const Functions::Entry& entry, const RequestPrefix& prefix,
                         std::span<const std::byte> args) {
      // Resources belong to one coordinator: a new one (the chief restarted) builds its own.
      if (prefix.coordinator != state_.coordinator) {
        state_.worker.clear();
        state_.coordinator = prefix.coordinator;
      }
      if (!state_.worker.has(prefix.id)) {
        state_.worker.put(prefix.id, entry.build(state_.worker, args));
        ++state_.report.resources_built;
      }
      reply_bytes_.clear();
      return ok();
    }

    SendReply ok() const {
      SendReply reply;
      reply.count = reply_bytes_.size();
      reply.payload = reply_bytes_;
      return reply;
    }

    template <class E>
    SessionStep fail(const E& error) {
      try {
        throw error;
      } catch (...) {
        return fail_current();
      }
    }

    SessionStep fail_current() {
      reply_bytes_ = encode(current_remote_error());
      SendReply reply;
      reply.status = static_cast<std::uint8_t>(ReplyStatus::error);
      reply.count = reply_bytes_.size();
      reply.payload = reply_bytes_;
      return reply;
    }

    State& state_;
    std::uint8_t kind_ = 0;
    std::size_t payload_bytes_ = 0;  // the request's
    std::vector<std::byte> payload_;
    std::vector<std::byte> reply_bytes_;
  };

  State(const cluster::ClusterSpec& spec, int index, const Functions& registered,
        WorkerOptions worker_options)
      : functions(registered),
        options(std::move(worker_options)),
        worker(validated(spec, index, options), index),
        service(spec.address({cluster::TaskType::worker, index}), fmt::format("worker {}", index),
                {coordinator_fingerprint(spec), kTunables, spec.collective_size(), worker.rank(),
                 options.cluster_token ? options.cluster_token
                                       : environment_variable("STRATA_CLUSTER_TOKEN")},
                *this, options.max_message_bytes, options.timeout) {}

  static const cluster::ClusterSpec& validated(const cluster::ClusterSpec& spec, int index,
                                               const WorkerOptions& options) {
    if (!spec.contains({cluster::TaskType::worker, index}))
      throw ConfigurationError(
          -1, "WorkerServer",
          fmt::format("worker {} is not in the cluster ({})", index, spec.canonical()),
          "serve each worker task of the cluster from its own process");
    const auto token = options.cluster_token ? options.cluster_token
                                             : environment_variable("STRATA_CLUSTER_TOKEN");
    if (token && token->empty())
      throw ConfigurationError(-1, "WorkerServer", "the cluster token is empty",
                               "set a secret shared by every task, or leave it unset");
    if (options.timeout <= std::chrono::milliseconds::zero())
      throw UsageError(-1, "WorkerServer",
                       fmt::format("the timeout {} ms is not positive", options.timeout.count()),
                       "pass a positive WorkerOptions::timeout");
    return spec;
  }

  std::unique_ptr<transport::tcp::ServiceSession> open(int,
                                                       transport::tcp::ServiceReplier) override {
    return std::make_unique<Session>(*this);
  }

  WorkerReport serve() {
    const auto end = service.serve(options.timeout);
    worker.clear();
    report.refused = service.stats().refused;
    if (aborted) std::rethrow_exception(aborted);
    if (end == transport::tcp::ServiceEnd::idle)
      throw TimeoutError(worker.rank(), "WorkerServer::serve",
                         fmt::format("worker {} has had no coordinator connected for {} ms",
                                     worker.index(), options.timeout.count()),
                         "start the chief's ClusterCoordinator, or raise the timeout "
                         "(WorkerOptions::timeout or STRATA_TIMEOUT)");
    return report;
  }

  const Functions& functions;
  WorkerOptions options;
  Worker worker;
  std::uint64_t coordinator = 0;
  WorkerReport report;
  std::exception_ptr aborted;  // what the coordinator's abort carried
  transport::tcp::ServiceServer service;
};

STRATA_DECL WorkerServer::WorkerServer(const cluster::ClusterSpec& cluster, int index,
                                       const Functions& functions, WorkerOptions options)
    : state_(std::make_unique<State>(cluster, index, functions, std::move(options))) {}

STRATA_DECL WorkerServer::~WorkerServer() = default;

STRATA_DECL std::uint16_t WorkerServer::port() const noexcept {
  return state_->service.port();
}

STRATA_DECL WorkerReport WorkerServer::serve() {
  return state_->serve();
}

STRATA_DECL void WorkerServer::stop() {
  state_->service.stop();
}

}  // namespace strata::coordinator
