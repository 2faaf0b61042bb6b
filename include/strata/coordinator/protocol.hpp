// strata/coordinator/protocol.hpp — what the coordinator and the workers' servers say to each
// other, over the TCP transport's service frames (transport/tcp/service_server.hpp).
//
// A request frame's kind is an Operation; its payload a RequestPrefix, the function's name and
// the arguments' bytes (codec.hpp). A reply's root is a ReplyStatus; its payload the result's
// bytes, or a RemoteError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <strata/cluster/cluster_spec.hpp>
#include <strata/coordinator/codec.hpp>
#include <strata/core/detail/fnv1a.hpp>
#include <strata/core/error.hpp>

namespace strata::coordinator {

enum class Operation : std::uint8_t {
  run = 1,    ///< run a function
  build = 2,  ///< build a per-worker resource (if this coordinator has not already)
  done = 3,   ///< the coordinator has finished: the worker's server returns
  abort = 4,  ///< the coordinator failed for good (a ps task died): the worker's server raises
              ///< the error it carries (a RemoteError after the prefix)
};

enum class ReplyStatus : std::int32_t { ok = 0, error = 1 };

/// The protocol's version, checked in the handshake as the ps protocol checks its tunables.
inline constexpr std::uint64_t kTunables = 0x7374'7261'7461'4331ULL;  // "strataC1"

/// The handshake's cluster fingerprint of the coordinator's connections: the whole cluster.
inline std::uint64_t coordinator_fingerprint(const cluster::ClusterSpec& cluster) {
  const std::uint64_t hash = strata::detail::fnv1a(cluster.fingerprint(), "coordinator");
  return hash == 0 ? 1 : hash;
}

/// What precedes a request's arguments.
struct RequestPrefix {
  std::uint64_t signature = 0;    ///< the function's name and types (functions.hpp)
  std::uint64_t id = 0;           ///< the closure's id (run) or the resource's (build)
  std::uint64_t coordinator = 0;  ///< the coordinator's incarnation: resources are per coordinator
  std::string name;
};

inline void encode(Writer& writer, const RequestPrefix& prefix) {
  writer.le(prefix.signature);
  writer.le(prefix.id);
  writer.le(prefix.coordinator);
  Codec<std::string>::encode(writer, prefix.name);
}

inline RequestPrefix decode_prefix(Reader& reader) {
  RequestPrefix prefix;
  prefix.signature = reader.le<std::uint64_t>();
  prefix.id = reader.le<std::uint64_t>();
  prefix.coordinator = reader.le<std::uint64_t>();
  prefix.name = Codec<std::string>::decode(reader);
  return prefix;
}

/// An error raised on a worker, as it travels: its class and root cause.
struct RemoteError {
  enum class Kind : std::uint8_t {
    exception = 0,  ///< not a strata error: FunctionError on the coordinator
    timeout = 1,
    peer_failure = 2,
    mismatch = 3,
    configuration = 4,
    usage = 5,
    function = 6,
    cancelled = 7,
  };
  Kind kind = Kind::exception;
  std::int32_t rank = -1;  ///< where it started (the root cause's rank)
  std::string what;        ///< the root cause, naming that rank; an exception's what()
};

/// The RemoteError of the exception being handled.
inline RemoteError current_remote_error() {
  RemoteError remote;
  const auto from = [&](RemoteError::Kind kind, const Error& error) {
    remote.kind = kind;
    remote.rank = error.root_cause().rank;
    remote.what = error.root_cause().what_happened;
  };
  try {
    throw;
  } catch (const TimeoutError& e) {
    from(RemoteError::Kind::timeout, e);
  } catch (const PeerFailureError& e) {
    from(RemoteError::Kind::peer_failure, e);
  } catch (const MismatchError& e) {
    from(RemoteError::Kind::mismatch, e);
  } catch (const ConfigurationError& e) {
    from(RemoteError::Kind::configuration, e);
  } catch (const UsageError& e) {
    from(RemoteError::Kind::usage, e);
  } catch (const CancelledError& e) {
    from(RemoteError::Kind::cancelled, e);
  } catch (const Error& e) {
    from(RemoteError::Kind::function, e);
  } catch (const std::exception& e) {
    remote.what = e.what();
  } catch (...) {
    remote.what = "an exception that is not a std::exception";
  }
  return remote;
}

inline std::vector<std::byte> encode(const RemoteError& error) {
  Writer writer;
  writer.le(static_cast<std::uint8_t>(error.kind));
  writer.le(static_cast<std::uint32_t>(error.rank));
  Codec<std::string>::encode(writer, error.what);
  return std::move(writer).take();
}

/// @throws MismatchError for bytes that are not a RemoteError.
inline RemoteError decode_error(std::span<const std::byte> bytes) {
  Reader reader(bytes);
  RemoteError error;
  const auto kind = reader.le<std::uint8_t>();
  if (kind > static_cast<std::uint8_t>(RemoteError::Kind::cancelled))
    throw MismatchError(-1, "coordinator", fmt::format("error kind {}", kind),
                        "run the same strata version on every task");
  error.kind = static_cast<RemoteError::Kind>(kind);
  error.rank = static_cast<std::int32_t>(reader.le<std::uint32_t>());
  error.what = Codec<std::string>::decode(reader);
  return error;
}

/// The exception `error` of function `function` (run on `worker`) becomes on the coordinator
/// (rank `rank`): the same class with the same root cause, or FunctionError for an exception of
/// the function's own.
inline std::exception_ptr to_exception(const RemoteError& error, int rank,
                                       std::string_view function, std::string_view worker) {
  const std::string operation = fmt::format("function '{}'", function);
  RootCause cause{error.rank, error.what};
  const std::string happened = fmt::format("on {}: {}", worker, error.what);
  switch (error.kind) {
    case RemoteError::Kind::timeout:
      return std::make_exception_ptr(TimeoutError(rank, operation, std::move(cause)));
    case RemoteError::Kind::peer_failure:
      return std::make_exception_ptr(PeerFailureError(rank, operation, std::move(cause)));
    case RemoteError::Kind::mismatch:
      return std::make_exception_ptr(MismatchError(rank, operation, std::move(cause)));
    case RemoteError::Kind::configuration:
      return std::make_exception_ptr(ConfigurationError(
          rank, operation, happened, "fix the configuration named, on that worker"));
    case RemoteError::Kind::usage:
      return std::make_exception_ptr(
          UsageError(rank, operation, happened, "fix the call named, in the function"));
    case RemoteError::Kind::cancelled:
      return std::make_exception_ptr(CancelledError(rank, operation, happened, ""));
    case RemoteError::Kind::function:
    case RemoteError::Kind::exception:
      break;
  }
  return std::make_exception_ptr(FunctionError(rank, operation,
                                               fmt::format("raised on {}: {}", worker, error.what),
                                               "fix the function, or handle the error inside it"));
}

}  // namespace strata::coordinator
