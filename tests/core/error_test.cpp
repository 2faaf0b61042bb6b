// Tests for strata/core/error.hpp: the hierarchy and the message format
// "strata: rank R: OPERATION: what happened; what to do".
#include <strata/core/error.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <doctest/doctest.h>

namespace {

using strata::ConfigurationError;
using strata::Error;
using strata::MismatchError;
using strata::PeerFailureError;
using strata::TimeoutError;
using strata::UsageError;

static_assert(std::is_base_of_v<std::runtime_error, Error>);
static_assert(std::is_base_of_v<Error, TimeoutError>);
static_assert(std::is_base_of_v<Error, PeerFailureError>);
static_assert(std::is_base_of_v<Error, MismatchError>);
static_assert(std::is_base_of_v<Error, ConfigurationError>);
static_assert(std::is_base_of_v<Error, UsageError>);
// The base is never thrown directly: its constructor is protected.
static_assert(
    !std::is_constructible_v<Error, int, std::string_view, std::string_view, std::string_view>);
// The caller can tell what to do from the type alone: no type derives from another.
static_assert(!std::is_base_of_v<TimeoutError, PeerFailureError>);
static_assert(!std::is_base_of_v<PeerFailureError, TimeoutError>);
static_assert(!std::is_base_of_v<UsageError, ConfigurationError>);

// What a handler that only knows the base sees.
struct Caught {
  std::string what;
  int rank;
  std::string operation;
};

template <class E>
Caught throw_and_catch(const E& error) {
  try {
    throw error;
  } catch (const Error& e) {
    return {e.what(), e.rank(), e.operation()};
  }
}

TEST_CASE("every error type is caught as strata::Error with rank, operation and message") {
  const Caught timeout = throw_and_catch(TimeoutError(3, "all_reduce", "rank 2 did not arrive"));
  CHECK(timeout.rank == 3);
  CHECK(timeout.operation == "all_reduce");
  CHECK(timeout.what ==
        "strata: rank 3: all_reduce: rank 2 did not arrive; check that every rank calls the same "
        "collectives in the same order, or raise the deadline (CommunicatorOptions::timeout or "
        "STRATA_TIMEOUT)");

  const Caught peer = throw_and_catch(PeerFailureError(0, "broadcast", "rank 1 closed the link"));
  CHECK(peer.what ==
        "strata: rank 0: broadcast: rank 1 closed the link; the group cannot continue: restart "
        "the job (or re-create the group)");

  const Caught mismatch = throw_and_catch(MismatchError(1, "all_reduce", "rank 0 sent 10 floats"));
  CHECK(
      mismatch.what.starts_with("strata: rank 1: all_reduce: rank 0 sent 10 floats; every rank "
                                "must call the same collective"));

  const Caught config = throw_and_catch(
      ConfigurationError(-1, "TF_CONFIG", "task.index 4 is out of range", "fix TF_CONFIG"));
  CHECK(config.rank == -1);
  CHECK(config.what == "strata: TF_CONFIG: task.index 4 is out of range; fix TF_CONFIG");

  const Caught usage =
      throw_and_catch(UsageError(5, "reduce_scatter", "out has 3 elements", "pass count/n"));
  CHECK(usage.what == "strata: rank 5: reduce_scatter: out has 3 elements; pass count/n");
}

TEST_CASE("messages: rank -1 is left out, an empty what-to-do adds nothing") {
  CHECK(std::string(UsageError(-1, "divide", "the divisor is 0", "").what()) ==
        "strata: divide: the divisor is 0");
  CHECK(std::string(UsageError(0, "divide", "the divisor is 0", "").what()) ==
        "strata: rank 0: divide: the divisor is 0");
  CHECK(std::string(TimeoutError(2, "barrier", "late", "wait longer").what()) ==
        "strata: rank 2: barrier: late; wait longer");
}

TEST_CASE("errors are std::exceptions and copy their state") {
  const MismatchError original(7, "all_gather", "different counts");
  const MismatchError copy = original;  // NOLINT(performance-unnecessary-copy-initialization)
  CHECK(copy.rank() == 7);
  CHECK(copy.operation() == "all_gather");
  CHECK(std::string(copy.what()) == original.what());
  try {
    throw copy;
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).starts_with("strata: rank 7: all_gather: different counts; "));
  }
}

}  // namespace

TEST_CASE("exit_status_of gives each error class its sysexits status") {
  using strata::exit_status_of;
  using strata::ExitStatus;
  CHECK(exit_status_of(PeerFailureError(0, "all_reduce", "x")) == ExitStatus::peer_failure);
  CHECK(exit_status_of(TimeoutError(0, "all_reduce", "x")) == ExitStatus::timeout);
  CHECK(exit_status_of(MismatchError(0, "all_reduce", "x")) == ExitStatus::mismatch);
  CHECK(exit_status_of(ConfigurationError(-1, "TF_CONFIG", "x", "y")) == ExitStatus::configuration);
  CHECK(exit_status_of(UsageError(0, "all_reduce", "x", "y")) == ExitStatus::usage_error);
  CHECK(exit_status_of(strata::CheckpointError(0, "Checkpoint::save", "x", "y")) ==
        ExitStatus::checkpoint);
  CHECK(exit_status_of(std::runtime_error("x")) == ExitStatus::failure);
  // Distinct, and clear of 0, the command-line 2, a shell's 126/127 and 128+N for signals.
  const int statuses[] = {1, 69, 70, 74, 75, 76, 78};
  const ExitStatus all[] = {ExitStatus::failure,      ExitStatus::peer_failure,
                            ExitStatus::usage_error,  ExitStatus::checkpoint,
                            ExitStatus::timeout,      ExitStatus::mismatch,
                            ExitStatus::configuration};
  for (std::size_t i = 0; i < std::size(all); ++i)
    CHECK(static_cast<int>(all[i]) == statuses[i]);
}
