// strata/core/error.hpp — the one exception hierarchy of strata.
//
// Split by what the caller can do about it:
//
//   Error                      base; never thrown directly
//   ├── TimeoutError           a peer did not arrive in time: retry with a larger deadline, or
//   │                          find the slow/stalled rank named in the message
//   ├── PeerFailureError       a peer died or failed: restart the job (or the group)
//   ├── MismatchError          ranks called a collective with different count, type, op or
//   │                          root: a bug in the training program; fix the call sites
//   ├── ConfigurationError     bad environment or options (STRATA_TIMEOUT, TF_CONFIG, ...):
//   │                          fix the configuration named in the message
//   ├── UsageError             a wrong call on this rank (bad span sizes, bad root, use after
//   │                          failure): fix the calling code
//   ├── FunctionError          a function a ClusterCoordinator scheduled raised on its worker:
//   │                          fix the function (its text is in the message)
//   ├── CheckpointError        a checkpoint could not be written or read (disk full, read-only
//   │                          directory, a damaged file, a variable of another shape): free
//   │                          space or pick another checkpoint, as the message says
//   └── CancelledError         a scheduled function never ran: an earlier one failed, or the
//                              coordinator shut down; handle that first, then schedule again
//
// Every message has the form "strata: rank R: OPERATION: what happened; what to do". Low
// layers work with error codes; the communicator boundary throws, adding rank and operation.
// A failure that started on another rank says so through its RootCause, passed on unchanged
// from rank to rank: "strata: rank 0: all_reduce: peer failure: rank 2 closed ...; what to do".
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

namespace strata {

/// Where a failure started and what happened there. Ranks pass it on unchanged (over TCP in
/// the abort message), so that every rank of a failed group names the same root cause, once.
struct RootCause {
  int rank = -1;              ///< the rank the failure started at; -1 when no rank applies
  std::string what_happened;  ///< stands alone: names that rank ("rank 2 closed ...")
};

/// Base of every exception strata throws. `rank()` is the rank that raised it (-1 when no
/// rank applies, e.g. a configuration read before a group exists) and `operation()` the
/// call that failed ("all_reduce", "STRATA_TIMEOUT", ...).
class Error : public std::runtime_error {
 public:
  int rank() const noexcept { return rank_; }
  const std::string& operation() const noexcept { return operation_; }
  /// Where the failure started: this error itself, or another rank's failure passed on.
  const RootCause& root_cause() const noexcept { return cause_; }

 protected:
  Error(int rank, std::string_view operation, std::string_view what_happened,
        std::string_view what_to_do)
      : std::runtime_error(format_message(rank, operation, what_happened, what_to_do)),
        rank_(rank),
        operation_(operation),
        cause_{rank, rank >= 0 ? fmt::format("rank {} in {}: {}", rank, operation, what_happened)
                               : fmt::format("{}: {}", operation, what_happened)} {}

  /// A failure that started elsewhere (`cause`), as this rank's `operation` meets it; `kind`
  /// names it ("peer failure", "timeout", "mismatch").
  Error(int rank, std::string_view operation, std::string_view kind, RootCause cause,
        std::string_view what_to_do)
      : std::runtime_error(format_message(
            rank, operation, fmt::format("{}: {}", kind, cause.what_happened), what_to_do)),
        rank_(rank),
        operation_(operation),
        cause_(std::move(cause)) {}

 private:
  static std::string format_message(int rank, std::string_view operation,
                                    std::string_view what_happened, std::string_view what_to_do) {
    std::string message =
        rank >= 0 ? fmt::format("strata: rank {}: {}: {}", rank, operation, what_happened)
                  : fmt::format("strata: {}: {}", operation, what_happened);
    if (!what_to_do.empty()) message += fmt::format("; {}", what_to_do);
    return message;
  }

  int rank_;
  std::string operation_;
  RootCause cause_;
};

/// A blocking call passed its deadline, usually because a peer is slow, stalled or never
/// called the matching collective. The communicator is poisoned afterwards.
class TimeoutError : public Error {
 public:
  static constexpr std::string_view kWhatToDo =
      "check that every rank calls the same collectives in the same order, or raise the "
      "deadline (CommunicatorOptions::timeout or STRATA_TIMEOUT)";
  TimeoutError(int rank, std::string_view operation, std::string_view what_happened,
               std::string_view what_to_do = kWhatToDo)
      : Error(rank, operation, what_happened, what_to_do) {}
  /// Another rank's timeout, passed on.
  TimeoutError(int rank, std::string_view operation, RootCause cause,
               std::string_view what_to_do =
                   "find the rank named above (stopped, hung, or calling other collectives), or "
                   "raise the deadline (CommunicatorOptions::timeout or STRATA_TIMEOUT)")
      : Error(rank, operation, "timeout", std::move(cause), what_to_do) {}
};

/// A peer died, aborted or failed inside the group; every surviving rank sees this.
class PeerFailureError : public Error {
 public:
  static constexpr std::string_view kWhatToDo =
      "the group cannot continue: restart the job (or re-create the group)";
  PeerFailureError(int rank, std::string_view operation, std::string_view what_happened,
                   std::string_view what_to_do = kWhatToDo)
      : Error(rank, operation, what_happened, what_to_do) {}
  /// A failure that started at `cause.rank` (a peer that died, aborted or failed), met here.
  PeerFailureError(int rank, std::string_view operation, RootCause cause,
                   std::string_view what_to_do = kWhatToDo)
      : Error(rank, operation, "peer failure", std::move(cause), what_to_do) {}
};

/// Ranks disagree about a collective call (kind, count, element type, op or root). Raised on
/// every rank of the group, never silently reduced.
class MismatchError : public Error {
 public:
  static constexpr std::string_view kWhatToDo =
      "every rank must call the same collective with the same count, element type, op and "
      "root, in the same order";
  MismatchError(int rank, std::string_view operation, std::string_view what_happened,
                std::string_view what_to_do = kWhatToDo)
      : Error(rank, operation, what_happened, what_to_do) {}
  /// Another rank's mismatch, passed on.
  MismatchError(int rank, std::string_view operation, RootCause cause,
                std::string_view what_to_do = kWhatToDo)
      : Error(rank, operation, "mismatch", std::move(cause), what_to_do) {}
};

/// Options or environment are invalid; the message names the setting.
class ConfigurationError : public Error {
 public:
  ConfigurationError(int rank, std::string_view operation, std::string_view what_happened,
                     std::string_view what_to_do)
      : Error(rank, operation, what_happened, what_to_do) {}
};

/// The calling code broke a documented precondition on this rank.
class UsageError : public Error {
 public:
  UsageError(int rank, std::string_view operation, std::string_view what_happened,
             std::string_view what_to_do)
      : Error(rank, operation, what_happened, what_to_do) {}
};

/// A function scheduled by a ClusterCoordinator raised an exception that is not a strata error
/// on the worker that ran it; the message names the function and the worker and carries the
/// exception's text.
class FunctionError : public Error {
 public:
  FunctionError(int rank, std::string_view operation, std::string_view what_happened,
                std::string_view what_to_do)
      : Error(rank, operation, what_happened, what_to_do) {}
};

/// A checkpoint could not be written (disk full, a read-only directory: the previous checkpoint
/// is untouched), is not a valid checkpoint (truncated, damaged, not safetensors), or does not fit
/// what it restores into (a variable of another shape or element type). The message names the
/// file and, where one applies, the tensor.
class CheckpointError : public Error {
 public:
  CheckpointError(int rank, std::string_view operation, std::string_view what_happened,
                  std::string_view what_to_do)
      : Error(rank, operation, what_happened, what_to_do) {}
};

/// A scheduled function was cancelled before it ran: an earlier function failed (the error that
/// `join` raises), or the coordinator shut down.
class CancelledError : public Error {
 public:
  CancelledError(int rank, std::string_view operation, std::string_view what_happened,
                 std::string_view what_to_do)
      : Error(rank, operation, what_happened, what_to_do) {}
};

/// Raises `error`, a failure that started elsewhere, as `operation` on `rank` meets it: a
/// TimeoutError or MismatchError stays one, anything else becomes a PeerFailureError, each
/// with the root cause unchanged (another exception's text is its cause). `what_to_do` replaces
/// the class's advice when given.
[[noreturn]] inline void raise_root_cause(const std::exception_ptr& error, int rank,
                                          std::string_view operation,
                                          std::string_view what_to_do = {}) {
  const auto raise = [&]<class Class>(std::type_identity<Class>, RootCause cause) {
    if (what_to_do.empty()) throw Class(rank, operation, std::move(cause));
    throw Class(rank, operation, std::move(cause), what_to_do);
  };
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    raise(std::type_identity<TimeoutError>{}, e.root_cause());
  } catch (const MismatchError& e) {
    raise(std::type_identity<MismatchError>{}, e.root_cause());
  } catch (const Error& e) {
    raise(std::type_identity<PeerFailureError>{}, e.root_cause());
  } catch (const std::exception& e) {
    raise(std::type_identity<PeerFailureError>{}, RootCause{-1, e.what()});
  } catch (...) {  // not a std::exception: no text to pass on
  }
  throw PeerFailureError(rank, operation,
                         RootCause{-1, "an exception that is not a std::exception"});
}

/// The exit status a program gives each error class, so that a launcher or a script can tell a
/// root cause from its echoes: a rank that exits with `peer_failure` or `timeout` failed because
/// of another. The values are <sysexits.h>'s for the nearest meaning; strata's own programs
/// (strata-perf, the example trainer) exit with them, and strata-launch reads them.
enum class ExitStatus : int {
  failure = 1,         ///< any other exception
  peer_failure = 69,   ///< PeerFailureError (EX_UNAVAILABLE)
  usage_error = 70,    ///< UsageError: a bug in the calling code (EX_SOFTWARE)
  timeout = 75,        ///< TimeoutError (EX_TEMPFAIL)
  mismatch = 76,       ///< MismatchError (EX_PROTOCOL)
  checkpoint = 74,     ///< CheckpointError (EX_IOERR)
  configuration = 78,  ///< ConfigurationError (EX_CONFIG)
};

/// The exit status of a program that ends with `error`.
inline ExitStatus exit_status_of(const std::exception& error) noexcept {
  if (dynamic_cast<const TimeoutError*>(&error) != nullptr) return ExitStatus::timeout;
  if (dynamic_cast<const PeerFailureError*>(&error) != nullptr) return ExitStatus::peer_failure;
  if (dynamic_cast<const MismatchError*>(&error) != nullptr) return ExitStatus::mismatch;
  if (dynamic_cast<const ConfigurationError*>(&error) != nullptr) return ExitStatus::configuration;
  if (dynamic_cast<const UsageError*>(&error) != nullptr) return ExitStatus::usage_error;
  if (dynamic_cast<const CheckpointError*>(&error) != nullptr) return ExitStatus::checkpoint;
  return ExitStatus::failure;
}

}  // namespace strata
