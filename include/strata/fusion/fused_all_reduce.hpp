// strata/fusion/fused_all_reduce.hpp — all-reduce a list of gradients in buckets, step after
// step, keeping the buckets (and their one-time cross-rank check) from call to call.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include <strata/communicator/communicator.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/fusion/bucket_plan.hpp>
#include <strata/fusion/gradient_buckets.hpp>

namespace strata::fusion {

/// All-reduces lists of gradients through GradientBuckets kept per list: the first call with a
/// list (its element types and counts, in order, and the op) plans its buckets and checks it
/// against the other ranks; later calls with the same list reuse them, wherever its buffers now
/// are. What strategies use for `apply_gradients` over a list of (gradient, variable) pairs.
///
/// Every rank must call with the same lists in the same order (as it must call any collective).
/// Thread safety: one thread (one replica) per object.
template <communicator::Communicator Comm>
class FusedAllReduce {
 public:
  explicit FusedAllReduce(BucketOptions options = {}) : options_(options) {}

  const BucketOptions& options() const noexcept { return options_; }

  /// Buckets for `gradients` reduced with `op`, bound to their buffers and ready for a step:
  /// `ready(i)` as gradient i is computed, then `wait()`.
  /// @throws what GradientBuckets throws (a failed object stays failed: so does this list).
  GradientBuckets<Comm>& buckets(Comm& comm, std::span<const GradientRef> gradients, ReduceOp op) {
    for (auto& kept : kept_) {
      if (&kept->communicator() != &comm || kept->op() != op ||
          !same_gradients(kept->gradients(), gradients))
        continue;
      kept->rebind(gradients);
      return *kept;
    }
    kept_.push_back(std::make_unique<GradientBuckets<Comm>>(
        comm, std::vector<GradientRef>(gradients.begin(), gradients.end()), options_, op));
    return *kept_.back();
  }

  /// All-reduces `gradients` in place with `op`: every gradient made ready in list order, then
  /// waited for.
  void operator()(Comm& comm, std::span<const GradientRef> gradients, ReduceOp op) {
    GradientBuckets<Comm>& step = buckets(comm, gradients, op);
    for (std::size_t i = 0; i < gradients.size(); ++i)
      step.ready(i);
    step.wait();
  }

 private:
  BucketOptions options_;
  std::vector<std::unique_ptr<GradientBuckets<Comm>>> kept_;  // one per list
};

}  // namespace strata::fusion
