// tests/support/tcp_worker_conformance.hpp — the `conformance` scenario of the worker processes
// (tcp_worker.cpp, nccl_worker.cpp): one rank's share of the sweep of tcp_test.cpp, run in a
// process of its own, checking this rank's outputs against the one collective reference
// (tools/reference/) and, through digests, that every rank's results are bit-identical. The
// buffers are host memory; a `Memory` policy may stage them elsewhere (device memory) around
// each call, guards included.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <collective_reference/elements.hpp>
#include <collective_reference/inputs.hpp>
#include <collective_reference/reference.hpp>
#include <strata/communicator/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

#include "conformance_case.hpp"
#include "sweep_plan.hpp"

namespace conformance {

using Clock = std::chrono::steady_clock;

namespace testing = strata::testing;
namespace reference = strata::reference;
using strata::DataType;
using strata::ReduceOp;
using strata::communicator::Collective;
using testing::CaseSpec;

// Sentinel elements on each side of every buffer catch writes past a span.
constexpr std::size_t kGuard = 16;
constexpr std::size_t kMaxPrinted = 20;
constexpr int kMaxRanks = 64;

struct Totals {
  std::size_t cases = 0;
  std::size_t failed = 0;
  std::size_t wrong = 0;
  std::size_t printed = 0;
  std::size_t not_identical = 0;  // collectives whose results differ in bits between ranks
};

// A buffer of `count` elements between guards, all holding the sentinel.
template <strata::Element T>
class Buffer {
 public:
  explicit Buffer(std::size_t count)
      : storage_(count + 2 * kGuard, testing::detail::sentinel_value<T>()), count_(count) {}
  T* data() noexcept { return storage_.data() + kGuard; }
  std::size_t count() const noexcept { return count_; }
  /// The elements and the guards on both sides: what a Memory policy stages.
  std::span<T> storage() noexcept { return storage_; }
  bool guards_intact() const {
    const T sentinel = testing::detail::sentinel_value<T>();
    for (std::size_t i = 0; i < kGuard; ++i)
      if (!reference::same_bits(storage_[i], sentinel) ||
          !reference::same_bits(storage_[kGuard + count_ + i], sentinel))
        return false;
    return true;
  }

 private:
  std::vector<T> storage_;
  std::size_t count_;
};

// Running hashes of the outputs every rank must have bit for bit (all_reduce, broadcast,
// all_gather); compared across ranks at the end of each phase.
struct Digests {
  std::uint64_t all_reduce = 0;
  std::uint64_t broadcast = 0;
  std::uint64_t all_gather = 0;
};

// Buffers used where they are, in host memory.
struct HostMemory {
  template <strata::Element T, class Call>
  void run(Buffer<T>& send, Buffer<T>& recv, Call&& call) {
    call(send.data(), recv.data());
  }
  template <class Comm>
  void all_gather(Comm& comm, std::span<const std::int64_t> mine, std::span<std::int64_t> all) {
    comm.all_gather(mine, all);
  }
};

// The collective of `spec` on `send_count` elements at `send` and `recv_count` at `recv`.
template <strata::Element T, class Comm>
void call(Comm& comm, const CaseSpec& spec, T* send, std::size_t send_count, T* recv,
          std::size_t recv_count) {
  if (spec.in_place) {
    const std::span<T> data(send, send_count);
    switch (spec.kind) {
      case Collective::all_reduce:
        return comm.all_reduce(data, spec.op);
      case Collective::broadcast:
        return comm.broadcast(data, spec.root);
      case Collective::reduce:
        return comm.reduce(data, spec.op, spec.root);
      case Collective::all_gather:
        return comm.all_gather(data);
      case Collective::reduce_scatter:
        return comm.reduce_scatter(data, spec.op);
      case Collective::barrier:
        return comm.barrier();
    }
    return;
  }
  const std::span<const T> in(send, send_count);
  const std::span<T> out(recv, recv_count);
  switch (spec.kind) {
    case Collective::all_reduce:
      return comm.all_reduce(in, out, spec.op);
    case Collective::broadcast:
      return comm.broadcast(in, out, spec.root);
    case Collective::reduce:
      return comm.reduce(in, out, spec.op, spec.root);
    case Collective::all_gather:
      return comm.all_gather(in, out);
    case Collective::reduce_scatter:
      return comm.reduce_scatter(in, out, spec.op);
    case Collective::barrier:
      return comm.barrier();
  }
}

// The reference results of elements [first, first + spec.count) of a reduction. The last
// ones computed are kept, per element type, for the in- or out-of-place twin of the case that
// follows: references of 16-bit floats cost more than the collective itself.
template <strata::Element T>
std::span<const reference::Expected<T>> references(const CaseSpec& spec, std::size_t first) {
  struct Memo {
    ReduceOp op = ReduceOp::sum;
    int size = 0;  // 0: nothing kept
    std::size_t first = 0;
    std::vector<reference::Expected<T>> values;
  };
  static Memo memo;
  if (memo.size == spec.size && memo.op == spec.op && memo.first == first &&
      memo.values.size() == spec.count)
    return memo.values;
  const reference::Inputs<T> input(spec.op, spec.size);
  memo.values.resize(spec.count);
  for (std::size_t i = 0; i < spec.count; ++i)
    memo.values[i] = reference::expected_reduction<T>(spec.op, spec.size,
                                                      [&](int q) { return input(q, first + i); });
  memo.op = spec.op;
  memo.size = spec.size;
  memo.first = first;
  return memo.values;
}

// One case on this rank: its buffers, filled with its inputs, and the checks of what the call
// left in them (this rank's outputs, its out-of-place input and the guards).
template <strata::Element T>
class RankCase {
 public:
  RankCase(const CaseSpec& spec, int rank, std::string_view phase, Totals& totals)
      : spec_(spec),
        rank_(rank),
        phase_(phase),
        totals_(totals),
        input_(spec.op, spec.size),
        in_count_(spec.kind == Collective::reduce_scatter ? n() * spec.count : spec.count),
        out_count_(output_count(spec, rank)),
        send_(spec.in_place ? std::max(in_count_, out_count_) : in_count_),
        recv_(spec.in_place ? 0 : out_count_) {
    const auto own = static_cast<std::size_t>(rank);
    in_ = send_.data();
    out_ = spec.in_place ? send_.data() : recv_.data();
    // In place, all_gather's input and reduce_scatter's output are this rank's block; the rest
    // of an all_gather buffer keeps the sentinel, so blocks left unwritten show.
    if (spec.in_place && spec.kind == Collective::all_gather) in_ += own * spec.count;
    if (spec.in_place && spec.kind == Collective::reduce_scatter) out_ += own * spec.count;
    for (std::size_t i = 0; i < in_count_; ++i)
      in_[i] = input_(rank, i);
  }

  Buffer<T>& send() noexcept { return send_; }
  Buffer<T>& recv() noexcept { return recv_; }

  // Checks everything the call left; returns how many elements were wrong (the first
  // kMaxPrinted of the whole run are printed).
  std::size_t check() {
    check_outputs();
    if (!spec_.in_place)
      for (std::size_t i = 0; i < in_count_; ++i)
        if (!reference::same_bits(in_[i], input_(rank_, i)))
          fail("send", i, reference::format_value(in_[i]),
               reference::format_value(input_(rank_, i)),
               " (an out-of-place input must be unchanged)");
    if (!send_.guards_intact()) fail("guards of send", 0, "overwritten", "intact");
    if (!recv_.guards_intact()) fail("guards of recv", 0, "overwritten", "intact");
    return wrong_;
  }

  // Adds the outputs every rank must have bit for bit to their running hash.
  void add_to(Digests& digests) const {
    std::uint64_t* digest = spec_.kind == Collective::all_reduce   ? &digests.all_reduce
                            : spec_.kind == Collective::broadcast  ? &digests.broadcast
                            : spec_.kind == Collective::all_gather ? &digests.all_gather
                                                                   : nullptr;
    if (digest != nullptr)
      for (std::size_t i = 0; i < out_count_; ++i)
        *digest = reference::mix64(*digest ^ reference::bits_of(out_[i]));
  }

 private:
  std::size_t n() const noexcept { return static_cast<std::size_t>(spec_.size); }

  static std::size_t output_count(const CaseSpec& spec, int rank) noexcept {
    if (spec.kind == Collective::all_gather)
      return static_cast<std::size_t>(spec.size) * spec.count;
    if (spec.kind == Collective::reduce && spec.empty_non_root_recv && rank != spec.root) return 0;
    return spec.count;
  }

  void fail(std::string_view where, std::size_t index, const std::string& got,
            const std::string& expected, std::string_view why = "") {
    ++wrong_;
    if (totals_.printed == kMaxPrinted) return;
    ++totals_.printed;
    fmt::print("wrong: rank {}, {} {}: {}[{}]: got {}, expected {}{}\n", rank_, phase_,
               testing::describe(spec_), where, index, got, expected, why);
  }

  void check_reduced(std::span<const reference::Expected<T>> expected) {
    for (std::size_t i = 0; i < spec_.count; ++i)
      if (!reference::matches(out_[i], expected[i]))
        fail("output", i, reference::format_value(out_[i]), reference::describe(expected[i]));
  }

  void check_bits(std::size_t i, T expected, std::string_view why = "") {
    if (!reference::same_bits(out_[i], expected))
      fail("output", i, reference::format_value(out_[i]), reference::format_value(expected), why);
  }

  void check_outputs() {
    const std::size_t count = spec_.count;
    switch (spec_.kind) {
      case Collective::all_reduce:
        return check_reduced(references<T>(spec_, 0));
      case Collective::broadcast:
        for (std::size_t i = 0; i < count; ++i)
          check_bits(i, input_(spec_.root, i));
        return;
      case Collective::reduce:
        return check_reduce();
      case Collective::all_gather:
        for (std::size_t j = 0; j < n() * count; ++j)
          check_bits(j, input_(static_cast<int>(j / count), j % count));
        return;
      case Collective::reduce_scatter:
        return check_reduced(references<T>(spec_, static_cast<std::size_t>(rank_) * count));
      case Collective::barrier:
        return;
    }
  }

  void check_reduce() {
    if (rank_ == spec_.root) return check_reduced(references<T>(spec_, 0));
    if (spec_.in_place) {
      for (std::size_t i = 0; i < spec_.count; ++i)
        check_bits(i, input_(rank_, i), " (a non-root's buffer must be untouched)");
      return;
    }
    for (std::size_t i = 0; i < out_count_; ++i)
      check_bits(i, testing::detail::sentinel_value<T>(), " (a non-root's recv must be untouched)");
  }

  const CaseSpec& spec_;
  int rank_;
  std::string_view phase_;
  Totals& totals_;
  reference::Inputs<T> input_;
  std::size_t in_count_;
  std::size_t out_count_;
  Buffer<T> send_;
  Buffer<T> recv_;
  T* in_ = nullptr;
  T* out_ = nullptr;
  std::size_t wrong_ = 0;
};

// Runs one case on this rank and checks this rank's outputs, inputs and guards.
template <strata::Element T, class Comm, class Memory>
void run_case(Comm& comm, Memory& memory, std::string_view phase, const CaseSpec& spec,
              Clock::time_point& began, Totals& totals, Digests& digests) {
  RankCase<T> one(spec, comm.rank(), phase, totals);
  try {
    began = Clock::now();
    memory.run(one.send(), one.recv(), [&](T* send, T* recv) {
      call<T>(comm, spec, send, one.send().count(), recv, one.recv().count());
    });
  } catch (const std::exception&) {
    fmt::print("failed: rank {}, {} {} threw\n", comm.rank(), phase, testing::describe(spec));
    throw;
  }
  const std::size_t wrong = one.check();
  one.add_to(digests);
  ++totals.cases;
  if (wrong > 0) {
    ++totals.failed;
    totals.wrong += wrong;
  }
}

// The roots of broadcast and reduce: every rank.
std::vector<int> roots_of(Collective kind, int size) {
  if (!strata::communicator::has_root(kind)) return {0};
  std::vector<int> roots;
  for (int r = 0; r < size; ++r)
    roots.push_back(r);
  return roots;
}

// Runs `kinds` × counts × element types × ops × roots × in/out of place and a barrier on
// `comm`, then compares this rank's digests with every other rank's.
template <class Comm, class Memory = HostMemory>
void run_phase(Comm& comm, std::string_view phase, std::span<const Collective> kinds,
               std::span<const std::size_t> counts, Clock::time_point& began, Totals& totals,
               Memory memory = {}) {
  Digests digests;
  const int size = comm.size();
  if (size > kMaxRanks)
    throw std::invalid_argument(fmt::format("conformance checks at most {} ranks", kMaxRanks));
  for (Collective kind : kinds)
    for (std::size_t count : counts)
      for (DataType type : testing::kAllDataTypes)
        for (ReduceOp op : testing::detail::ops_of(kind))
          for (int root : roots_of(kind, size))
            for (bool in_place : {false, true}) {
              CaseSpec spec{kind, type, op, size, count, root, in_place};
              // Reduce out of place: non-roots alternate between no output and an untouched one.
              spec.empty_non_root_recv =
                  kind == Collective::reduce && !in_place && (root + size) % 2 == 1;
              strata::visit_data_type(type, [&]<class T>(std::type_identity<T>) {
                run_case<T>(comm, memory, phase, spec, began, totals, digests);
              });
            }
  run_case<std::int8_t>(comm, memory, phase, CaseSpec{Collective::barrier, DataType::int8}, began,
                        totals, digests);

  // Results must be bit-identical on every rank (the determinism promise).
  const std::int64_t mine[] = {std::bit_cast<std::int64_t>(digests.all_reduce),
                               std::bit_cast<std::int64_t>(digests.broadcast),
                               std::bit_cast<std::int64_t>(digests.all_gather)};
  constexpr std::string_view kNames[] = {"all_reduce", "broadcast", "all_gather"};
  std::vector<std::int64_t> everyone(std::size(mine) * static_cast<std::size_t>(size));
  began = Clock::now();
  memory.all_gather(comm, std::span<const std::int64_t>(mine), std::span(everyone));
  for (std::size_t k = 0; k < std::size(mine); ++k)
    for (int q = 0; q < size; ++q)
      if (everyone[static_cast<std::size_t>(q) * std::size(mine) + k] != mine[k]) {
        fmt::print(
            "wrong: rank {}, {}: {} results differ in bits from rank {}'s (results must be "
            "bit-identical on every rank)\n",
            comm.rank(), phase, kNames[k], q);
        ++totals.not_identical;
        break;
      }
}

}  // namespace conformance
