// strata/fusion/fused_all_reduce.hpp — all-reduce a list of gradients in buckets, step after
// step, keeping the buckets (and their one-time cross-rank check) from call to call.
#pragma once

#include <algorithm>
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
    for (Entry& entry : entries_) {
      if (entry.comm != &comm || entry.op != op || entry.specs.size() != gradients.size()) continue;
      if (!std::equal(entry.specs.begin(), entry.specs.end(), gradients.begin(),
                      [](const GradientSpec& spec, const GradientRef& ref) {
                        return spec.type == ref.type && spec.count == ref.count;
                      }))
        continue;
      entry.buckets->rebind(gradients);
      return *entry.buckets;
    }
    Entry entry;
    entry.comm = &comm;
    entry.op = op;
    for (const GradientRef& ref : gradients)
      entry.specs.push_back({ref.type, ref.count});
    entry.buckets = std::make_unique<GradientBuckets<Comm>>(
        comm, std::vector<GradientRef>(gradients.begin(), gradients.end()), options_, op);
    entries_.push_back(std::move(entry));
    return *entries_.back().buckets;
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
  struct Entry {
    const Comm* comm = nullptr;
    ReduceOp op = ReduceOp::sum;
    std::vector<GradientSpec> specs;
    std::unique_ptr<GradientBuckets<Comm>> buckets;
  };
  BucketOptions options_;
  std::vector<Entry> entries_;
};

}  // namespace strata::fusion
