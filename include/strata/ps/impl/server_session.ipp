// strata/ps/impl/server_session.ipp — one worker connection of a parameter server
// (ps/impl/server.ipp): its requests one at a time, each read in steps straight into where its
// bytes go, checked, and only then applied. A worker on the server's host may attach a
// shared-memory region, through which its large calls' values then travel instead of the socket
// (attach_region, ps/protocol.hpp). Included by ps/impl/server.ipp once Server::State is
// complete, never on its own.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/ps/detail/shard.hpp>
#include <strata/ps/protocol.hpp>
#include <strata/transport/shm/handover.hpp>
#include <strata/transport/shm/host.hpp>
#include <strata/transport/shm/region.hpp>
#include <strata/transport/tcp/frame.hpp>
#include <strata/transport/tcp/growing_payload.hpp>
#include <strata/transport/tcp/service_session.hpp>

namespace strata::ps {

static_assert(std::tuple_size_v<decltype(AttachSpec::host)> ==
              transport::shm::HostIdentity::kBytes);
static_assert(std::tuple_size_v<decltype(AttachSpec::ticket)> ==
              transport::shm::HandoverTicket::kNameBytes +
                  transport::shm::HandoverTicket::kSecretBytes);

// One worker connection's requests, one at a time.
class Server::State::Session : public transport::tcp::ServiceSession {
 public:
  Session(State& state, int rank, transport::tcp::ServiceReplier replier)
      : state_(state), rank_(rank), replier_(std::move(replier)) {}
  ~Session() override { state_.forget(this); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Sends the reply this session's waiting push_pull of shard `handle` deferred.
  void release(std::uint32_t handle) {
    replier_(std::get<SendReply>(values_reply(handle, state_.shards[handle].version)));
  }

  SessionStep on_request(const transport::tcp::FrameHeader& request) override {
    request_ = request;
    const auto operation = static_cast<std::uint8_t>(request.kind);
    if (operation < 1 || operation > kLastOperation)
      return error(Status::bad_request, fmt::format("unknown operation {}", operation));
    if (in_region()) {
      const auto op = static_cast<Operation>(operation);
      if (!may_use_region(op))
        return error(
            Status::bad_request,
            fmt::format("a {} request cannot carry its values in a shared region", to_string(op)));
      if (!region_)
        return error(Status::bad_request,
                     "a request whose values are in a shared region, on a connection that "
                     "attached none");
    }
    switch (static_cast<Operation>(operation)) {
      case Operation::create:
        if (request.payload_bytes < kCreateSpecBytes)
          return error(Status::bad_request, "a create request without its spec");
        stage_ = Stage::create_spec;
        return read(std::span(prefix_.data(), kCreateSpecBytes));
      case Operation::done:
        if (request.payload_bytes != 0)
          return error(Status::bad_request, "a done request carries nothing");
        return state_.finished(rank_);
      case Operation::attach_region:
        if (request.payload_bytes != kAttachSpecBytes)
          return error(Status::bad_request, "an attach_region request without its spec");
        stage_ = Stage::attach_spec;
        return read(std::span(prefix_.data(), kAttachSpecBytes));
      default:
        return on_shard_request();
    }
  }

  SessionStep on_payload() override {
    switch (stage_) {
      case Stage::create_spec:
        return on_create_spec();
      case Stage::create_name:
        return on_create_name();
      case Stage::create_values:
        return on_create_values();
      case Stage::push_values:
        return on_values();
      case Stage::state_spec:
        return on_state_spec();
      case Stage::state_slots:
        return on_state_slots();
      case Stage::attach_spec:
        return on_attach_spec();
    }
    return error(Status::bad_request, "a request out of order");
  }

  // A push waited for the server's hold: the client hears which replicas held it back before
  // its own deadline would name only this ps task.
  SessionStep on_hold_expired() override {
    Shard& shard = state_.shards[handle_];
    const std::string names = detail::waited_for(shard, this);
    detail::forget(shard, this);
    const bool bounded = shard.sync.spec.mode == SyncSpec::Mode::bounded_staleness;
    return error(
        Status::held_too_long,
        fmt::format("{} held this push of variable '{}' for {} ms waiting for {} to {}: a worker "
                    "stopped or hung without closing its connections",
                    state_.who(), shard.name, state_.hold().count(),
                    names.empty() ? std::string("the other replicas") : names,
                    bounded ? fmt::format("come within {} steps", shard.sync.spec.bound)
                            : fmt::format("push step {}", shard.version)));
  }

 private:
  enum class Stage : std::uint8_t {
    create_spec,
    create_name,
    create_values,
    push_values,
    state_spec,
    state_slots,
    attach_spec
  };

  bool in_region() const noexcept {
    return (request_.flags & static_cast<std::uint8_t>(transport::tcp::FrameFlag::in_region)) != 0;
  }

  // The region's first `count` values of type T: where a co-located worker's call keeps them.
  template <class T>
  std::span<T> region_values(std::uint64_t count) const {
    return std::span(reinterpret_cast<T*>(region_->data()), static_cast<std::size_t>(count));
  }

  // A worker asks whether it shares this server's host (probe), then hands over the region its
  // large calls' values are to travel through (collect). Collecting blocks the serving thread
  // until the worker hands the descriptor over, which it does as soon as its request is sent:
  // the wait is bounded well below the timeout, for a worker that dies in between.
  SessionStep on_attach_spec() {
    const auto spec = decode_attach(std::span<const std::byte>(prefix_.data(), kAttachSpecBytes));
    if (!spec) return error(Status::bad_request, "a malformed attach_region request");
    transport::shm::HostIdentity theirs;
    std::copy(spec->host.begin(), spec->host.end(), theirs.bytes.begin());
    const bool same_host = theirs.known() && theirs == state_.host;
    if (spec->phase == AttachSpec::Phase::probe) return ok(same_host ? 1 : 0);
    if (!same_host)
      return error(
          Status::bad_request,
          fmt::format("a shared region offered by a worker on another host than {}", state_.who()));
    transport::shm::HandoverTicket ticket;
    std::copy_n(spec->ticket.begin(), ticket.name.size(), ticket.name.begin());
    std::copy_n(spec->ticket.begin() + static_cast<std::ptrdiff_t>(ticket.name.size()),
                ticket.secret.size(), ticket.secret.begin());
    try {
      const Deadline deadline = Deadline::after(
          std::min<std::chrono::milliseconds>(state_.options.timeout, kHandoverWait));
      const int fd = transport::shm::collect_handover(ticket, -1, deadline);
      region_.emplace(transport::shm::Region::adopt(fd, spec->bytes, -1, rank_));
      region_->close_fd();
    } catch (const Error& e) {
      region_.reset();
      return error(
          Status::bad_request,
          fmt::format("{} could not map the worker's shared region: {}", state_.who(), e.what()));
    }
    return ok(spec->bytes);
  }

  static SessionStep read(std::span<std::byte> into) { return ReadPayload{{into}}; }
  static SessionStep read(std::span<std::byte> first, std::span<std::byte> second) {
    return ReadPayload{{first, second}};
  }

  SessionStep error(Status status, std::string why) {
    text_ = std::move(why);
    SendReply reply;
    reply.status = static_cast<std::uint8_t>(status);
    reply.payload =
        std::as_bytes(std::span(text_.data(), std::min(text_.size(), std::size_t{4096})));
    return reply;
  }

  SendReply ok(std::uint64_t count) const {
    SendReply reply;
    reply.count = count;
    return reply;
  }

  SessionStep on_create_spec() {
    const std::uint64_t left = request_.payload_bytes - kCreateSpecBytes;
    const auto spec = decode_create(std::span<const std::byte>(prefix_.data(), kCreateSpecBytes));
    // The element count is the peer's: bounded by the payload before it is multiplied, so that
    // no count wraps the sum into a match.
    if (!spec || !detail::is_value_type(request_.element_type) ||
        spec->elements != request_.count ||
        spec->elements > left / size_of(request_.element_type) ||
        left !=
            padded_name_bytes(spec->name_bytes) + spec->elements * size_of(request_.element_type))
      return error(Status::bad_request,
                   "a malformed create request (its spec, name and sizes do not add up)");
    spec_ = *spec;
    name_.assign(padded_name_bytes(spec->name_bytes), '\0');
    stage_ = Stage::create_name;
    return read(std::as_writable_bytes(std::span(name_)));
  }

  SessionStep on_create_name() {
    name_.resize(spec_.name_bytes);
    if (const auto existing = state_.find(name_)) return adopt(*existing);
    // The initial values arrive into this session, not into a shard: until their last byte is
    // in, no other worker can pull or adopt half of them, and a creator that goes away halfway
    // leaves nothing behind.
    stage_ = Stage::create_values;
    staging_f32_.clear();
    staging_f64_.clear();
    return on_create_values();
  }

  SessionStep on_create_values() {
    return request_.element_type == DataType::float32 ? create_values<float>()
                                                      : create_values<double>();
  }

  // The values grow with what has arrived: a create that claims gigabytes costs memory only as
  // its bytes come.
  template <class T>
  SessionStep create_values() {
    auto& values = staging<T>();
    const auto next = transport::tcp::grow_toward(values, static_cast<std::size_t>(spec_.elements));
    if (!next.empty()) return read(next);
    // Another worker's create of the name may have completed while these values arrived.
    if (const auto existing = state_.find(name_)) return adopt(*existing);
    handle_ = state_.create(name_, spec_, std::move(values));
    return ok(handle_);
  }

  // A create of a variable that exists: created before (by another worker, or by this one
  // before it restarted), its values win and travel back so that the caller starts from them;
  // initial values not read yet are dropped by the service.
  SessionStep adopt(std::uint32_t existing) {
    const Shard& shard = state_.shards[existing];
    const DataType type = request_.element_type;
    if (shard.type != type || shard.elements != spec_.elements || shard.update != spec_.update)
      return error(Status::exists_differently,
                   fmt::format("variable '{}' exists on {} with {} {} elements (update rule "
                               "{}); the request has {} {} elements (update rule {})",
                               shard.name, state_.who(), shard.elements, to_string(shard.type),
                               static_cast<int>(shard.update), spec_.elements, to_string(type),
                               static_cast<int>(spec_.update)));
    return values_reply(existing, existing);
  }

  SessionStep on_shard_request() {
    const auto operation = static_cast<Operation>(request_.kind);
    const auto handle = static_cast<std::uint32_t>(request_.root);
    if (handle >= state_.shards.size())
      return error(Status::unknown_variable,
                   fmt::format("{} holds no variable with handle {} ({} created): it was never "
                               "created there, or the ps task restarted and lost its variables",
                               state_.who(), handle, state_.shards.size()));
    const Shard& shard = state_.shards[handle];
    const bool push = operation == Operation::push || operation == Operation::push_pull;
    const std::uint64_t value_bytes = shard.elements * size_of(shard.type);
    const std::uint64_t payload = request_.payload_bytes;
    bool sized = false;
    switch (operation) {
      case Operation::pull:
      case Operation::pull_state:
        sized = payload == 0;
        break;
      case Operation::assign_state:  // its slot count comes with it: checked once read
        sized = payload >= kStateSpecBytes &&
                payload <= kStateSpecBytes + kMaxSlotsPerElement * value_bytes;
        break;
      default:
        sized = payload == (push ? kPushPrefixBytes : 0) + (in_region() ? 0 : value_bytes);
        break;
    }
    if (request_.element_type != shard.type || request_.count != shard.elements || !sized)
      return error(Status::mismatch,
                   fmt::format("{} of variable '{}' on {}: the shard holds {} {} elements, the "
                               "request {} {} elements in {} bytes",
                               to_string(operation), shard.name, state_.who(), shard.elements,
                               to_string(shard.type), request_.count,
                               to_string(request_.element_type), request_.payload_bytes));
    if (in_region() && value_bytes > region_->size())
      return error(Status::bad_request,
                   fmt::format("{} of variable '{}' on {}: its {} bytes do not fit the {} bytes "
                               "of the connection's shared region",
                               to_string(operation), shard.name, state_.who(), value_bytes,
                               region_->size()));
    handle_ = handle;
    if (operation == Operation::pull) return values_reply(handle, shard.version);
    if (operation == Operation::pull_state) return state_reply(handle);
    if (operation == Operation::assign_state) {
      stage_ = Stage::state_spec;
      return read(std::span(prefix_.data(), kStateSpecBytes));
    }
    stage_ = Stage::push_values;
    if (in_region()) {  // the values are in the region: only a push's prefix comes on the socket
      if (!push) return on_values();
      return read(std::span(prefix_.data(), kPushPrefixBytes));
    }
    const auto values = std::visit(
        [&](const auto& stored) {
          using T = typename std::decay_t<decltype(stored.values)>::value_type;
          auto& stage = staging<T>();
          stage.resize(stored.values.size());
          return std::as_writable_bytes(std::span(stage));
        },
        shard.data);
    if (!push) return read(values);
    return read(std::span(prefix_.data(), kPushPrefixBytes), values);
  }

  SessionStep on_values() {
    const auto operation = static_cast<Operation>(request_.kind);
    Shard& shard = state_.shards[handle_];
    detail::PushOutcome outcome;
    std::visit(
        [&](auto& values) {
          using T = typename std::decay_t<decltype(values.values)>::value_type;
          auto& incoming = staging<T>();
          const bool pull = operation == Operation::push_pull;
          if (operation == Operation::assign) {
            const std::span<const T> from =
                in_region() ? region_values<T>(shard.elements) : std::span<const T>(incoming);
            std::copy(from.begin(), from.end(), values.values.begin());
            if (in_region()) count_region_bytes(from.size_bytes());
            return;
          }
          const std::span<const std::byte> prefix(prefix_.data(), kPushPrefixBytes);
          const auto optimizer = decode_optimizer(prefix.first(kOptimizerSpecBytes));
          const auto sync = decode_sync(prefix.subspan(kOptimizerSpecBytes));
          if (!optimizer || !sync) {
            outcome = {detail::PushOutcome::Kind::error, "a push whose prefix is malformed", {}};
          } else if (operation == Operation::push && sync->mode != SyncSpec::Mode::asynchronous) {
            outcome = {detail::PushOutcome::Kind::error,
                       "a push that waits for other replicas must pull (push_pull)",
                       {}};
          } else if (in_region() && sync->mode == SyncSpec::Mode::asynchronous) {
            // Applied where the worker left it; a sum's new values are written back over it.
            const auto gradient = region_values<T>(shard.elements);
            count_region_bytes(gradient.size_bytes());
            if (std::string why = detail::meet_sync(shard, *sync, rank_); !why.empty())
              outcome = {detail::PushOutcome::Kind::error, std::move(why), {}};
            else
              outcome = detail::push_asynchronous(shard, values, *optimizer, gradient, pull);
          } else {
            if (in_region()) {  // a push that may wait keeps its gradient: copied out
              const auto gradient = region_values<T>(shard.elements);
              incoming.assign(gradient.begin(), gradient.end());
              count_region_bytes(gradient.size_bytes());
            }
            outcome = detail::push(shard, values, *optimizer, *sync, incoming, rank_, this, pull);
          }
        },
        shard.data);
    state_.answer(outcome.released, handle_);
    switch (outcome.kind) {
      case detail::PushOutcome::Kind::error:
        return error(Status::bad_request, std::move(outcome.why));
      case detail::PushOutcome::Kind::wait:
        return transport::tcp::WaitForReply{state_.hold()};
      case detail::PushOutcome::Kind::reply:
        break;
    }
    if (operation == Operation::push_pull)
      return values_reply(handle_, shard.version, outcome.snapshot);
    return ok(shard.version);
  }

  SessionStep on_state_spec() {
    const Shard& shard = state_.shards[handle_];
    const auto spec = decode_state(std::span<const std::byte>(prefix_.data(), kStateSpecBytes));
    const std::uint64_t slot_bytes =
        spec ? std::uint64_t{spec->slots_per_element} * shard.elements * size_of(shard.type) : 0;
    if (!spec || request_.payload_bytes != kStateSpecBytes + slot_bytes)
      return error(Status::bad_request,
                   fmt::format("a malformed assign_state of variable '{}' (its state spec and "
                               "slots do not add up)",
                               shard.name));
    state_spec_ = *spec;
    stage_ = Stage::state_slots;
    return read(std::visit(
        [&](const auto& stored) {
          using T = typename std::decay_t<decltype(stored.values)>::value_type;
          auto& stage = staging<T>();
          stage.resize(static_cast<std::size_t>(slot_bytes / sizeof(T)));
          return std::as_writable_bytes(std::span(stage));
        },
        shard.data));
  }

  SessionStep on_state_slots() {
    Shard& shard = state_.shards[handle_];
    std::string why = std::visit(
        [&](auto& values) {
          using T = typename std::decay_t<decltype(values.values)>::value_type;
          return detail::assign_state(shard, values, state_spec_, staging<T>());
        },
        shard.data);
    if (!why.empty()) return error(Status::bad_request, std::move(why));
    return ok(shard.version);
  }

  // The shard's optimizer state: its spec, then its slots, copied as values_reply copies.
  SessionStep state_reply(std::uint32_t handle) {
    const Shard& shard = state_.shards[handle];
    SendReply reply = ok(shard.version);
    reply.type = shard.type;
    std::visit(
        [&](const auto& stored) {
          const auto spec = encode(detail::state_of(stored));
          const auto slots = std::as_bytes(std::span(stored.state.slots));
          state_bytes_.assign(spec.begin(), spec.end());
          if (stored.slots_per_element)
            state_bytes_.insert(state_bytes_.end(), slots.begin(), slots.end());
        },
        shard.data);
    reply.payload = state_bytes_;
    return reply;
  }

  // Where a request's values are read to before they are checked and applied.
  template <class T>
  std::vector<T>& staging() {
    if constexpr (std::same_as<T, float>)
      return staging_f32_;
    else
      return staging_f64_;
  }

  // A snapshot of the shard's values: a later push must not tear the write. `staged`: the
  // push just applied left it where the reply is read from already (the staging buffer, or the
  // shared region of a request that carried its values there).
  SessionStep values_reply(std::uint32_t handle, std::uint64_t count, bool staged = false) {
    SendReply reply = ok(count);
    reply.type = state_.shards[handle].type;
    if (in_region()) {
      reply.flags = static_cast<std::uint8_t>(transport::tcp::FrameFlag::in_region);
      std::visit(
          [&](const auto& stored) {
            using T = typename std::decay_t<decltype(stored.values)>::value_type;
            if (!staged)
              std::copy(stored.values.begin(), stored.values.end(),
                        region_values<T>(stored.values.size()).begin());
            count_region_bytes(stored.values.size() * sizeof(T));
          },
          state_.shards[handle].data);
      return reply;
    }
    reply.payload = std::visit(
        [&](const auto& stored) {
          using T = typename std::decay_t<decltype(stored.values)>::value_type;
          auto& stage = staging<T>();
          if (!staged) stage.assign(stored.values.begin(), stored.values.end());
          return std::as_bytes(std::span(stage));
        },
        state_.shards[handle].data);
    return reply;
  }

  void count_region_bytes(std::uint64_t bytes) noexcept { state_.report.region_bytes += bytes; }

  State& state_;
  int rank_;
  transport::tcp::ServiceReplier replier_;
  transport::tcp::FrameHeader request_;
  Stage stage_ = Stage::create_spec;
  std::array<std::byte, std::max({kPushPrefixBytes, kCreateSpecBytes, kAttachSpecBytes})> prefix_{};
  CreateSpec spec_;
  std::string name_;
  std::uint32_t handle_ = 0;
  std::vector<float> staging_f32_;
  std::vector<double> staging_f64_;
  StateSpec state_spec_;
  std::vector<std::byte> state_bytes_;
  std::string text_;
  std::optional<transport::shm::Region> region_;  // a co-located worker's, once attached
};

}  // namespace strata::ps
