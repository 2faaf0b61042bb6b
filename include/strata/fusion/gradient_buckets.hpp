// strata/fusion/gradient_buckets.hpp — all-reduce a model's gradients in buckets, while the
// backward pass still runs.
//
//   strata::fusion::GradientBuckets buckets(comm, {gradient(w2), gradient(b2), gradient(w1)});
//   // each step:
//   buckets.ready(0);  // as backward produces each gradient: a full bucket starts at once
//   buckets.ready(1);
//   buckets.ready(2);
//   buckets.wait();    // before the optimizer: every gradient holds the reduced value
//
// Buckets start in the plan's order on every rank, whatever order the gradients become ready
// in: a bucket that fills early waits for the ones before it, so every rank issues the same
// collectives in the same order (out of order they would pair different buckets). A rank that
// registered a different gradient list gets MismatchError on the first step, naming the first
// gradient that differs, and so does every other rank. With `GradientBuckets(comm, specs)` the
// gradients live in the buckets (`buffer<T>(i)`: the trainer writes its gradient there, no copy
// in or out); with spans of the trainer's own buffers, `ready` copies in, and a bucket's values
// are copied out once it completes (by a `ready` while a later bucket runs, else by `wait`), except
// for a bucket of one gradient, all-reduced in the trainer's buffer. Either way, from `ready(i)` to
// the end of `wait()` gradient i's buffer belongs to strata.
// Over a TcpCommunicator with an arena (TcpOptions::shared_buffer_bytes) the buckets live in it,
// and co-located processes all-reduce them in place instead of staging them.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/communicator.hpp>
#include <strata/communicator/detail/collective_api.hpp>
#include <strata/communicator/shared_buffer.hpp>
#include <strata/communicator/work.hpp>
#include <strata/core/bfloat16.hpp>
#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/detail/convert_blocks.hpp>
#include <strata/core/detail/streaming_copy.hpp>
#include <strata/core/error.hpp>
#include <strata/core/float16.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/fusion/bucket_plan.hpp>
#include <strata/fusion/detail/same_gradients.hpp>
#include <strata/fusion/gradient_ref.hpp>

namespace strata::fusion {

/// Buckets of gradients all-reduced through `Comm` (any strata Communicator), one step at a
/// time: `ready(i)` for every gradient, in any order, then `wait()`. Not copyable; `ready` may be
/// called from several threads (backward hooks), `wait` from one.
template <communicator::Communicator Comm>
class GradientBuckets {
 public:
  /// Gradients that live in the trainer's buffers (copied in by `ready`, out as buckets complete).
  /// @throws UsageError for a GradientRef without kernels (not made by `gradient(span)`).
  GradientBuckets(Comm& comm, const std::vector<GradientRef>& gradients, BucketOptions options = {},
                  ReduceOp op = ReduceOp::sum)
      : GradientBuckets(comm, specs_of(gradients), gradients, kernels_of_refs(comm, gradients),
                        options, op) {}

  /// Gradients that live in the buckets: write gradient i into `buffer<T>(i)`. Their types are
  /// known only at run time, so this constructor compiles the kernels of every element type.
  GradientBuckets(Comm& comm, const std::vector<GradientSpec>& gradients,
                  BucketOptions options = {}, ReduceOp op = ReduceOp::sum)
      : GradientBuckets(comm, gradients, {}, kernels_of_specs(gradients), options, op) {}

  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  ~GradientBuckets() {
    // The collectives own the buckets' bytes until they complete.
    for (communicator::Work& work : works_) {
      try {
        work.wait();
      } catch (...) {  // the error was, or would have been, wait()'s to report
      }
    }
  }

  const BucketPlan& plan() const noexcept { return plan_; }
  /// The registered gradients' types and counts, in order.
  const std::vector<GradientSpec>& gradients() const noexcept { return specs_; }
  /// What the buckets reduce with, and through which communicator.
  ReduceOp op() const noexcept { return op_; }
  const Comm& communicator() const noexcept { return *comm_; }
  /// How many of the buckets' bytes lie in the communicator's arena, where co-located ranks
  /// all-reduce them in place (TcpOptions::shared_buffer_bytes); the rest are staged.
  std::size_t shared_bytes() const noexcept {
    std::size_t bytes = 0;
    for (const auto* buffers : {&storage_, &wire_})
      for (const communicator::SharedBuffer& buffer : *buffers)
        bytes += buffer.shared() ? buffer.bytes().size() : 0;
    return bytes;
  }

  /// Gradient i's place in its bucket (gradients that live in the buckets). Valid for the
  /// object's lifetime; between `ready(i)` and the end of `wait()` it belongs to the collective.
  template <Element T>
  std::span<T> buffer(std::size_t i) {
    check_index(i, "buffer");
    if (data_type_of<T> != specs_[i].type) {
      throw UsageError(comm_->rank(), "fusion::GradientBuckets::buffer",
                       fmt::format("gradient {} holds {}, not {}", i, to_string(specs_[i].type),
                                   to_string(data_type_of<T>)),
                       "ask for the element type the gradient was registered with");
    }
    const BucketSlot& slot = plan_.slot_of(i);
    auto* base = reinterpret_cast<T*>(storage_[plan_.bucket_of(i)].bytes().data());
    return {base + slot.offset, slot.count};
  }

  /// Points the gradients at new buffers of the same types and counts (gradients that live in
  /// the trainer's buffers), between steps: a trainer whose buffers move keeps its buckets and
  /// their one-time check. A bucket of one gradient is then all-reduced in its new buffer.
  /// @throws UsageError in the middle of a step, or for another list or gradients that live in
  ///         the buckets.
  void rebind(std::span<const GradientRef> gradients) {
    std::lock_guard lock(mutex_);
    check_usable();
    const bool same = same_gradients(specs_, gradients);
    const bool mid_step = std::find(ready_.begin(), ready_.end(), true) != ready_.end();
    if (!same || mid_step || (refs_.empty() && !specs_.empty()))
      throw UsageError(comm_->rank(), "fusion::GradientBuckets::rebind",
                       mid_step ? std::string("a step is in progress")
                       : !same  ? std::string("the gradients differ from the registered ones")
                                : std::string("the gradients live in the buckets"),
                       "rebind between steps, to buffers of the registered types and counts");
    refs_.assign(gradients.begin(), gradients.end());
  }

  /// Gradient i of this step is computed: its bucket starts as soon as it is full and every
  /// bucket before it has started. The first step first checks that every rank registered the
  /// same gradients (a collective: it blocks until every rank has a gradient ready).
  /// @throws MismatchError (first step, lists differ), UsageError (i twice in a step, out of
  ///         range), the communicator's errors.
  void ready(std::size_t i) {
    std::lock_guard lock(mutex_);
    check_usable();
    check_index(i, "ready");
    if (ready_[i]) {
      throw UsageError(comm_->rank(), "fusion::GradientBuckets::ready",
                       fmt::format("gradient {} is ready twice in one step", i),
                       "call ready(i) once per gradient per step, then wait()");
    }
    ready_[i] = true;
    const std::size_t b = plan_.bucket_of(i);
    const BucketSlot& slot = plan_.slot_of(i);
    if (compressed(b)) {
      const std::byte* from =
          refs_.empty() ? storage_[b].bytes().data() + slot.offset * sizeof(float) : refs_[i].data;
      narrow(reinterpret_cast<const float*>(from), wire_[b].bytes().data() + slot.offset * 2,
             slot.count);
    } else if (!refs_.empty() && !in_place(b) && slot.count > 0) {
      const std::size_t element = size_of(specs_[i].type);
      strata::detail::streaming_copy(storage_[b].bytes().data() + slot.offset * element,
                                     refs_[i].data, slot.count * element);
    }
    ++filled_[b];
    try {
      start_full_buckets();
    } catch (...) {
      failure_ = std::current_exception();
      throw;
    }
    finish_completed_buckets();
  }

  /// Waits for every bucket of the step; every gradient then holds its reduced value.
  /// @throws UsageError naming a gradient that was never made ready; the first error of the
  ///         step's collectives (every later call on this object rethrows it).
  void wait() {
    std::lock_guard lock(mutex_);
    check_usable();
    if (!checked_) {
      // A rank with no bucket to start (an empty list) still takes part in the check.
      try {
        detail::check_same_gradients(*comm_, specs_, plan_.options());
      } catch (...) {
        failure_ = std::current_exception();
        throw;
      }
      checked_ = true;
    }
    const auto missing = std::find(ready_.begin(), ready_.end(), false);
    if (missing != ready_.end()) {
      throw UsageError(
          comm_->rank(), "fusion::GradientBuckets::wait",
          fmt::format("gradient {} was not made ready this step", missing - ready_.begin()),
          "call ready(i) for every registered gradient before wait()");
    }
    // Each bucket is copied out as soon as it completes, while later ones are still in flight
    // (those that completed during the step's ready calls already are).
    std::exception_ptr first;
    const auto& buckets = plan_.buckets();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      try {
        works_[b].wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      if (first) continue;
      if (b >= finished_) finish_bucket(b);
    }
    works_.assign(works_.size(), communicator::Work{});
    finished_ = 0;
    if (first) {
      failure_ = first;
      std::rethrow_exception(first);
    }
    std::fill(ready_.begin(), ready_.end(), false);
    std::fill(filled_.begin(), filled_.end(), 0);
    next_ = 0;
  }

 private:
  GradientBuckets(Comm& comm, const std::vector<GradientSpec>& gradients,
                  std::vector<GradientRef> refs, const std::vector<const ReduceKernels*>& kernels,
                  BucketOptions options, ReduceOp op)
      : comm_(&comm),
        specs_(gradients),
        plan_(gradients, options),
        op_(op),
        refs_(std::move(refs)),
        ready_(gradients.size(), false),
        filled_(plan_.buckets().size(), 0),
        works_(plan_.buckets().size()) {
    storage_.reserve(plan_.buckets().size());
    wire_.reserve(plan_.buckets().size());
    kernels_.reserve(plan_.buckets().size());
    for (std::size_t b = 0; b < plan_.buckets().size(); ++b) {
      const Bucket& bucket = plan_.buckets()[b];
      if (!compressed(b))
        kernels_.push_back(kernels[bucket.slots.front().gradient]);
      else if (plan_.options().compression == Compression::bfloat16)
        kernels_.push_back(&reduce_kernels_of<bfloat16>);
      else
        kernels_.push_back(&reduce_kernels_of<float16>);
      // A bucket of one of the trainer's gradients is all-reduced in the trainer's buffer, and a
      // compressed bucket is narrowed from the trainer's buffers straight into its wire bytes:
      // neither needs storage of its own.
      const bool own_storage = refs_.empty() || !(in_place(b) || compressed(b));
      // What the all-reduce runs on (the wire bytes of a compressed bucket) goes to the arena.
      const std::size_t bytes = own_storage ? plan_.buckets()[b].bytes() : 0;
      storage_.push_back(compressed(b) ? communicator::SharedBuffer::ordinary(bytes)
                                       : allocate(bytes));
      wire_.push_back(allocate(compressed(b) ? plan_.buckets()[b].count * 2 : 0));
    }
  }

  /// A bucket's bytes, zeroed: in the communicator's arena where it has one with room
  /// (TcpCommunicator::allocate_shared), so that co-located ranks all-reduce the bucket in
  /// place; else ordinary memory. Ranks whose buckets land differently still agree: the
  /// all-reduce then stages them.
  communicator::SharedBuffer allocate(std::size_t bytes) {
    if constexpr (requires(Comm & c) {
                    { c.allocate_shared(bytes) } -> std::same_as<communicator::SharedBuffer>;
                  }) {
      if (bytes != 0) {
        try {
          communicator::SharedBuffer buffer = comm_->allocate_shared(bytes);
          std::memset(buffer.bytes().data(), 0, bytes);
          return buffer;
        } catch (const ConfigurationError&) {  // no arena, or no room in it: ordinary memory
        }
      }
    }
    return communicator::SharedBuffer::ordinary(bytes);
  }

  static std::vector<const ReduceKernels*> kernels_of_refs(
      const Comm& comm, const std::vector<GradientRef>& gradients) {
    std::vector<const ReduceKernels*> kernels;
    kernels.reserve(gradients.size());
    for (std::size_t i = 0; i < gradients.size(); ++i) {
      const ReduceKernels* k = gradients[i].kernels;
      if (k == nullptr || k->type != gradients[i].type) {
        throw UsageError(comm.rank(), "fusion::GradientBuckets",
                         fmt::format("gradient {} ({}) carries {} reduction kernels", i,
                                     to_string(gradients[i].type),
                                     k == nullptr ? std::string_view("no") : to_string(k->type)),
                         "make each GradientRef with fusion::gradient(std::span<T>)");
      }
      kernels.push_back(k);
    }
    return kernels;
  }

  static std::vector<const ReduceKernels*> kernels_of_specs(
      const std::vector<GradientSpec>& gradients) {
    std::vector<const ReduceKernels*> kernels;
    kernels.reserve(gradients.size());
    for (const GradientSpec& g : gradients)
      kernels.push_back(visit_data_type(
          g.type, [](auto tag) { return &reduce_kernels_of<typename decltype(tag)::type>; }));
    return kernels;
  }

  static std::vector<GradientSpec> specs_of(const std::vector<GradientRef>& gradients) {
    std::vector<GradientSpec> specs;
    specs.reserve(gradients.size());
    for (const GradientRef& g : gradients)
      specs.push_back({g.type, g.count});
    return specs;
  }

  bool in_place(std::size_t b) const noexcept {
    return !refs_.empty() && plan_.buckets()[b].slots.size() == 1 && !compressed(b);
  }

  bool compressed(std::size_t b) const noexcept {
    return plan_.options().compression != Compression::none &&
           plan_.buckets()[b].type == DataType::float32;
  }

  /// float32 values to the bucket's 16-bit wire bytes.
  void narrow(const float* from, std::byte* to, std::size_t count) const {
    if (plan_.options().compression == Compression::bfloat16)
      strata::detail::narrow(reinterpret_cast<bfloat16*>(to), from, count);
    else
      strata::detail::narrow(reinterpret_cast<float16*>(to), from, count);
  }

  /// A compressed bucket's reduced values, widened into the gradients.
  void widen_out(std::size_t b) {
    const bool bf16 = plan_.options().compression == Compression::bfloat16;
    for (const BucketSlot& slot : plan_.buckets()[b].slots) {
      std::byte* target = refs_.empty() ? storage_[b].bytes().data() + slot.offset * sizeof(float)
                                        : refs_[slot.gradient].data;
      auto* out = reinterpret_cast<float*>(target);
      const std::byte* wire = wire_[b].bytes().data() + slot.offset * 2;
      if (bf16)
        strata::detail::widen(out, reinterpret_cast<const bfloat16*>(wire), slot.count);
      else
        strata::detail::widen(out, reinterpret_cast<const float16*>(wire), slot.count);
    }
  }

  /// Copies out, in order, the buckets whose all-reduce has completed, without waiting, while a
  /// later bucket's all-reduce is still running: done from `ready`, this moves the copies out of
  /// the step's tail (the time after backward) into the backward pass, where they overlap the
  /// communication. With nothing in flight they would delay filling and starting the next
  /// bucket instead (ready called back to back), so they wait. A failed bucket stops it; `wait`
  /// reports the failure.
  void finish_completed_buckets() {
    if (finished_ + 1 >= next_) return;  // no completed bucket with a later one started
    try {
      if (works_[next_ - 1].test()) return;  // nothing in flight
      while (finished_ + 1 < next_ && works_[finished_].test()) {
        finish_bucket(finished_);
        ++finished_;
      }
    } catch (...) {  // wait() reports it
    }
  }

  /// A completed bucket's values to the gradients that do not live in it.
  void finish_bucket(std::size_t b) {
    if (compressed(b)) {
      widen_out(b);
    } else if (!refs_.empty() && !in_place(b)) {
      copy_out(b);
    }
  }

  void copy_out(std::size_t b) {
    const std::size_t element = size_of(plan_.buckets()[b].type);
    for (const BucketSlot& slot : plan_.buckets()[b].slots) {
      if (slot.count > 0) {
        strata::detail::streaming_copy(refs_[slot.gradient].data,
                                       storage_[b].bytes().data() + slot.offset * element,
                                       slot.count * element);
      }
    }
  }

  void check_index(std::size_t i, std::string_view call) const {
    if (i >= specs_.size()) {
      throw UsageError(comm_->rank(), fmt::format("fusion::GradientBuckets::{}", call),
                       fmt::format("gradient {} of {}", i, specs_.size()),
                       "pass the index of a registered gradient");
    }
  }

  void check_usable() const {
    if (failure_) std::rethrow_exception(failure_);
  }

  void start_full_buckets() {
    const auto& buckets = plan_.buckets();
    while (next_ < buckets.size() && filled_[next_] == buckets[next_].slots.size()) {
      if (!checked_) {
        detail::check_same_gradients(*comm_, specs_, plan_.options());
        checked_ = true;
      }
      const Bucket& bucket = buckets[next_];
      std::byte* bytes = in_place(next_) ? refs_[bucket.slots.front().gradient].data
                                         : storage_[next_].bytes().data();
      if (compressed(next_)) bytes = wire_[next_].bytes().data();
      works_[next_] = all_reduce_async(bytes, bucket.count, *kernels_[next_]);
      ++next_;
    }
  }

  /// Starts the all-reduce of a bucket of `kernels.type` (its type on the wire) as a checked
  /// call: no typed call, which would compile the kernels of every type a run-time tag may name.
  /// A communicator of the user's own that takes only typed calls gets them.
  communicator::Work all_reduce_async(std::byte* bytes, std::size_t count,
                                      const ReduceKernels& kernels) {
    using communicator::detail::CallAccess;
    if constexpr (CallAccess::kTakesCalls<Comm>) {
      const CollectiveCall call{
          Collective::all_reduce, kernels.type, count, op_, 0, bytes, bytes, &kernels};
      return CallAccess::submit(*comm_, call, {});
    } else {
      return visit_data_type(kernels.type, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return comm_->all_reduce_async(std::span<T>(reinterpret_cast<T*>(bytes), count), op_);
      });
    }
  }

  Comm* comm_;
  std::vector<GradientSpec> specs_;
  BucketPlan plan_;
  ReduceOp op_;
  std::vector<GradientRef> refs_;
  std::vector<communicator::SharedBuffer> storage_;
  std::vector<communicator::SharedBuffer> wire_;  // compressed buckets: their 16-bit values
  std::vector<const ReduceKernels*> kernels_;     // each bucket's, of its type on the wire
  std::vector<bool> ready_;
  std::vector<std::size_t> filled_;
  std::vector<communicator::Work> works_;
  std::size_t next_ = 0;      // buckets started this step
  std::size_t finished_ = 0;  // buckets copied out this step
  bool checked_ = false;
  std::exception_ptr failure_;
  std::mutex mutex_;
};

}  // namespace strata::fusion
