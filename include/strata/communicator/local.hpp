// strata/communicator/local.hpp — the in-process communicator: replicas as threads of one process.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/algorithms/all_gather_direct.hpp>
#include <strata/algorithms/all_reduce_reduce_to_one.hpp>
#include <strata/algorithms/all_reduce_scatter_gather.hpp>
#include <strata/algorithms/broadcast_direct.hpp>
#include <strata/algorithms/link.hpp>
#include <strata/algorithms/reduce_direct.hpp>
#include <strata/algorithms/reduce_scatter_direct.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/communicator/communicator.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/detail/serial_executor.hpp>
#include <strata/communicator/options.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/deadline.hpp>
#include <strata/core/error.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/local/group.hpp>
#include <strata/transport/local/link.hpp>

namespace strata::communicator {

/// One rank of a group of threads in one process (TF's in-process cross-device ops).
///
/// Ranks read each other's buffers directly, so data is copied only where the algorithm
/// must: an all-reduce reads about 2·S bytes and writes S per rank (`AllReduceScatterGather`),
/// or concentrates the reduction on rank 0 (`AllReduceReduceToOne`, TF's
/// `ReductionToOneDevice`). `AllReduceAlgorithm` picks one at compile time; the other
/// collectives have one algorithm each (`algorithms/*_direct.hpp`).
///
/// Buffers must be host memory. Each communicator is driven by one thread at a time (its
/// replica); different ranks run on different threads. Waiting ranks spin for a few
/// microseconds, then sleep, so idle replicas do not hold a core.
///
/// Example:
/// @code
///   auto group = strata::communicator::LocalCommunicator<>::create(4);
///   // on thread r: group[r].all_reduce(std::span(gradients), strata::ReduceOp::mean);
/// @endcode
///
/// @throws MismatchError on every rank when ranks disagree on a call; TimeoutError when a rank
/// does not arrive by the deadline; PeerFailureError when another rank failed or aborted;
/// UsageError for bad spans or roots on this rank. After any of them the group is failed.
static_assert(algorithms::SharedMemoryLink<transport::local::Link>);

template <class AllReduceAlgorithm = algorithms::AllReduceScatterGather>
class LocalCommunicator : public detail::CollectiveApi<LocalCommunicator<AllReduceAlgorithm>> {
  friend class detail::CollectiveApi<LocalCommunicator>;
  friend struct detail::CallAccess;

 public:
  static constexpr std::string_view kName = "local";
  /// The largest group this communicator can form (any number of threads).
  static constexpr int kMaxSize = std::numeric_limits<int>::max();
  static constexpr bool kSpansProcesses = false;
  using all_reduce_algorithm = AllReduceAlgorithm;

  /// Creates a group of `size` ranks; element r is rank r. Hand each to its own thread.
  /// @throws UsageError when size < 1.
  static std::vector<LocalCommunicator> create(int size, CommunicatorOptions options = {}) {
    if (size < 1)
      throw UsageError(-1, "LocalCommunicator::create",
                       fmt::format("a group needs at least one rank, got size {}", size),
                       "pass the number of replicas (threads) that will take part");
    auto group = std::make_shared<Group>(size, options);
    std::vector<LocalCommunicator> ranks;
    ranks.reserve(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      ranks.push_back(LocalCommunicator(group, r));
    return ranks;
  }

  LocalCommunicator(LocalCommunicator&&) noexcept = default;
  LocalCommunicator& operator=(LocalCommunicator&&) noexcept = default;
  LocalCommunicator(const LocalCommunicator&) = delete;
  LocalCommunicator& operator=(const LocalCommunicator&) = delete;
  ~LocalCommunicator() = default;  // waits for this rank's pending asynchronous calls

  int rank() const noexcept { return endpoint_->rank; }
  int size() const noexcept { return endpoint_->group->rendezvous.size(); }
  const CommunicatorOptions& options() const noexcept { return endpoint_->group->options; }

  // all_reduce, broadcast, reduce, all_gather, reduce_scatter, barrier and their _async twins
  // come from detail::CollectiveApi (communicator/detail/collective_api.hpp).

  /// Fails the whole group from any thread: every pending and later call on every rank throws
  /// `PeerFailureError` carrying `reason`. Use it when this replica cannot continue.
  void abort(std::string_view reason) noexcept { fail(abort_failure(rank(), reason)); }

  /// Fails the whole group from any thread because of `error`: every pending and later call
  /// on every rank raises its root cause (see fail_group).
  void fail(const std::exception_ptr& error) noexcept { endpoint_->group->rendezvous.fail(error); }

  /// Raises the group's failure if another rank failed it: for a caller that waits on
  /// something else between calls (NcclCommunicator watches its side group with it).
  void check_peers() const {
    if (endpoint_->group->rendezvous.failed())
      endpoint_->group->rendezvous.raise_failure(rank(), "check_peers");
  }

 private:
  struct Group {
    Group(int size, const CommunicatorOptions& opts) : rendezvous(size), options(opts) {}
    transport::local::Group rendezvous;
    CommunicatorOptions options;
  };

  // Heap-held so that queued asynchronous calls keep a stable address when the communicator
  // is moved. The executor is declared last: destroyed first, it finishes pending calls while
  // the rest is still alive.
  struct Endpoint {
    Endpoint(std::shared_ptr<Group> g, int r) : group(std::move(g)), rank(r) {}
    std::shared_ptr<Group> group;
    int rank;
    std::uint64_t round = 0;
    detail::SerialExecutor executor;
  };

  LocalCommunicator(std::shared_ptr<Group> group, int rank)
      : endpoint_(std::make_unique<Endpoint>(std::move(group), rank)) {}

  [[noreturn]] void fail_usage(Collective kind, std::string_view what,
                               std::string_view what_to_do) {
    UsageError error(rank(), to_string(kind), what, what_to_do);
    // The peers are about to wait for this rank: fail the group so they learn why at once.
    endpoint_->group->rendezvous.fail(std::make_exception_ptr(error));
    throw error;
  }

  void run(const CollectiveCall& call, const CallOptions& options) {
    endpoint_->executor.drain();  // keep call order with earlier asynchronous calls
    execute(*endpoint_, call, options);
  }

  Work submit(const CollectiveCall& call, const CallOptions& options) {
    Endpoint* endpoint = endpoint_.get();
    return endpoint->executor.submit(
        [endpoint, call, options] { execute(*endpoint, call, options); });
  }

  static void execute(Endpoint& endpoint, const CollectiveCall& call, const CallOptions& options) {
    auto& rendezvous = endpoint.group->rendezvous;
    const std::string_view operation = to_string(call.kind);
    if (rendezvous.failed()) rendezvous.raise_failure(endpoint.rank, operation);
    const Deadline deadline =
        Deadline::after(options.timeout.value_or(endpoint.group->options.timeout));
    const std::uint64_t round = endpoint.round++;
    rendezvous.call(round, endpoint.rank) = call;
    transport::local::Link link(rendezvous, round, endpoint.rank, deadline, operation);
    // Every kind opens a transfer, the barrier too: ranks that disagree on the kind must still
    // agree on the bookkeeping.
    link.open_transfer();  // every rank has posted its call
    try {
      transport::local::check_agreement(link);
      switch (call.kind) {
        case Collective::all_reduce:
          AllReduceAlgorithm::run(link, call);
          break;
        case Collective::broadcast:
          algorithms::BroadcastDirect::run(link, call);
          break;
        case Collective::reduce:
          algorithms::ReduceDirect::run(link, call);
          break;
        case Collective::all_gather:
          algorithms::AllGatherDirect::run(link, call);
          break;
        case Collective::reduce_scatter:
          algorithms::ReduceScatterDirect::run(link, call);
          break;
        case Collective::barrier:
          break;
      }
      // No rank returns while a peer may still read its buffers (a barrier has none).
      if (call.kind != Collective::barrier) link.sync();
    } catch (...) {
      // Whatever failed here (a peer, a deadline, the kernel), the peers must learn at once.
      rendezvous.fail(std::current_exception());
      rendezvous.end_transfer(/*failed=*/true);
      throw;
    }
    rendezvous.end_transfer(/*failed=*/false);
  }

  std::unique_ptr<Endpoint> endpoint_;
};

}  // namespace strata::communicator
