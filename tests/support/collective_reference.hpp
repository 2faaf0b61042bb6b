// tests/support/collective_reference.hpp — nccl-tests-style data checks for collectives.
//
// What it offers:
//   - `RankTeam<Comm>`: the ranks of one group, each driven by its own persistent thread (rank 0
//     by the calling thread), so thousands of cases do not start thousands of threads.
//   - `input_value<T>(rank, index, op)`: deterministic inputs per (rank, index, type). Integers
//     cover their whole range (int8/uint8 sums wrap on two ranks already; products use odd
//     values, so they wrap without collapsing to zero); floating point is uniform in [-1, 1), or
//     in [0.5, 1.5) for products so that eight factors neither underflow nor overflow.
//   - `reference<T>(inputs, op)`: an independent reference, computed in rank order in wider
//     arithmetic: integer sums and products modulo 2^64 (exact for every integer type, then cast
//     back modularly, so wrap-around matches), min/max in int64, means as the wrapped sum divided
//     with truncation; floating point in long double.
//   - tolerances: exact for integers and for min/max. Floating sum: |got - ref| <= n·eps·Σ|x_r|;
//     mean: eps·Σ|x_r| + eps·|ref| (the sum's bound divided by n, plus the division's rounding);
//     product: n·eps·|ref|. eps is the epsilon of the type the library accumulates in (float
//     for float16/bfloat16, else T itself); float16 and bfloat16 round once more, so their bound
//     adds 0.5 ulp of T at |ref| + bound.
//   - `ConformanceRunner<Comm>::run(CaseSpec)`: fills every rank's buffers, runs one collective
//     on all ranks, and checks every rank's output against the reference, split by index over
//     the rank threads. Beyond the outputs it checks that out-of-place inputs are unchanged, that
//     outputs a collective must not touch (reduce on non-roots) are untouched, that 64 guard
//     bytes around every buffer survive, and that all_reduce/broadcast/all_gather outputs are
//     bit-identical on every rank (the determinism promise). It counts wrong elements
//     (nccl-tests' #wrong) and reports the first, by (rank, index), with got and expected.
//   - `small_count_cases`, `large_count_cases`: the sweep plan shared by the conformance tests,
//     chosen by STRATA_TEST_SWEEP (`Sweep`); `run_cases` runs a plan and summarizes it.
#pragma once

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/communicator/collective.hpp>
#include <strata/communicator/options.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_op.hpp>

namespace strata::testing {

using communicator::Collective;

// ---- sweep level -------------------------------------------------------------------------------

/// How much of the conformance product to run, from `STRATA_TEST_SWEEP`:
///   quick     the sanitizer presets: large counts capped at 2^20+3;
///   standard  the default (unset): small counts in full, large counts sampled;
///   full      the complete product at every count.
enum class Sweep { quick, standard, full };

inline Sweep sweep_from_environment() {
  const char* value = std::getenv("STRATA_TEST_SWEEP");  // NOLINT(concurrency-mt-unsafe)
  const std::string_view text = value == nullptr ? "" : value;
  if (text.empty() || text == "standard" || text == "default") return Sweep::standard;
  if (text == "quick") return Sweep::quick;
  if (text == "full") return Sweep::full;
  throw std::invalid_argument(
      fmt::format("STRATA_TEST_SWEEP='{}': use quick, standard (the default) or full", text));
}

inline std::string_view to_string(Sweep sweep) {
  switch (sweep) {
    case Sweep::quick:
      return "quick";
    case Sweep::standard:
      return "standard";
    case Sweep::full:
      return "full";
  }
  return "invalid";
}

// ---- element helpers ---------------------------------------------------------------------------

/// The unsigned integer with the bits of T (for bit-exact comparisons).
template <Element T>
using Bits = std::conditional_t<
    sizeof(T) == 1, std::uint8_t,
    std::conditional_t<sizeof(T) == 2, std::uint16_t,
                       std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

template <Element T>
Bits<T> bits_of(T value) noexcept {
  return std::bit_cast<Bits<T>>(value);
}

template <Element T>
bool same_bits(T a, T b) noexcept {
  return bits_of(a) == bits_of(b);
}

/// Exact value of an element in long double (16-bit floats widen exactly).
template <Element T>
long double to_long_double(T value) noexcept {
  if constexpr (is_half_precision_v<T>) {
    return static_cast<float>(value);
  } else {
    return static_cast<long double>(value);
  }
}

/// "-3", "0.25", "0.25 (bits 0x3400)": readable and unambiguous.
template <Element T>
std::string format_value(T value) {
  if constexpr (std::is_integral_v<T>) {
    return fmt::format("{}", static_cast<long long>(value));
  } else if constexpr (is_half_precision_v<T>) {
    return fmt::format("{} (bits {:#06x})", static_cast<float>(value), value.bits());
  } else {
    return fmt::format("{}", value);
  }
}

// ---- inputs ------------------------------------------------------------------------------------

/// splitmix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// Rank `rank`'s input at `index` for element type T; `op` only selects the range (products
/// need positive floats near 1 and odd integers). Deterministic, independent of world size.
template <Element T>
[[gnu::always_inline]] inline T input_value(int rank, std::size_t index, ReduceOp op) noexcept {
  const std::uint64_t h = mix64(static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ULL +
                                (static_cast<std::uint64_t>(rank) << 40) +
                                (static_cast<std::uint64_t>(data_type_of<T>) << 56) + 0x5eedULL);
  const bool product = op == ReduceOp::product;
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(product ? (h | 1u) : h);  // modular: the whole range of T
  } else if constexpr (std::same_as<T, double>) {
    const double unit = static_cast<double>(h >> 11) * 0x1p-53;  // [0, 1), 53 bits
    return product ? 0.5 + unit : 2.0 * unit - 1.0;
  } else {
    const float unit = static_cast<float>(h >> 40) * 0x1p-24f;  // [0, 1), 24 bits: exact
    const float value = product ? 0.5f + unit : 2.0f * unit - 1.0f;
    return T(value);  // float16/bfloat16 round to nearest even
  }
}

// ---- the reference -----------------------------------------------------------------------------

/// What an element of a reduction must be: exact for integers (`tolerance` 0, `exact` set);
/// for floating point `value` within `tolerance`.
template <Element T>
struct Expected {
  long double value = 0;
  long double tolerance = 0;
  T exact{};  // integers, min and max: the bits the result must have
  bool is_exact = false;
};

namespace detail {

/// 0.5 ulp of float16/bfloat16 at magnitude `magnitude` (subnormals included).
template <Element T>
long double half_ulp(long double magnitude) {
  constexpr int kMantissaBits = std::same_as<T, float16> ? 10 : 7;
  constexpr int kMinExponent = std::same_as<T, float16> ? -14 : -126;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m · 2^exponent, m in [0.5, 1)
  const int binade = magnitude == 0 ? kMinExponent : std::max(exponent - 1, kMinExponent);
  return std::ldexp(0.5L, binade - kMantissaBits);
}

template <Element T>
[[gnu::always_inline]] inline Expected<T> integer_reference(std::span<const T> inputs,
                                                            ReduceOp op) {
  Expected<T> expected;
  expected.is_exact = true;
  auto wide = [](T x) { return static_cast<std::int64_t>(x); };
  auto modular = [&](T x) { return static_cast<std::uint64_t>(wide(x)); };
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      std::uint64_t sum = 0;
      for (T x : inputs)
        sum += modular(x);
      const T wrapped = static_cast<T>(sum);  // modular conversion (C++20)
      expected.exact =
          op == ReduceOp::sum
              ? wrapped
              : static_cast<T>(wide(wrapped) / static_cast<std::int64_t>(inputs.size()));
      break;
    }
    case ReduceOp::product: {
      std::uint64_t product = 1;
      for (T x : inputs)
        product *= modular(x);
      expected.exact = static_cast<T>(product);
      break;
    }
    case ReduceOp::min:
    case ReduceOp::max: {
      std::int64_t best = wide(inputs[0]);
      for (T x : inputs)
        best = op == ReduceOp::min ? std::min(best, wide(x)) : std::max(best, wide(x));
      expected.exact = static_cast<T>(best);
      break;
    }
  }
  expected.value = static_cast<long double>(wide(expected.exact));
  return expected;
}

template <Element T>
[[gnu::always_inline]] inline Expected<T> floating_reference(std::span<const T> inputs, ReduceOp op,
                                                             int roundings) {
  using Acc = std::conditional_t<is_half_precision_v<T>, float, T>;
  const long double eps = std::numeric_limits<Acc>::epsilon();
  const auto n = static_cast<long double>(inputs.size());
  Expected<T> expected;
  long double value = 0;
  long double tolerance = 0;
  long double partial_bound = 0;  // bounds the magnitude of every partial result
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean: {
      long double abs_sum = 0;
      for (T x : inputs) {
        value += to_long_double(x);
        abs_sum += std::fabs(to_long_double(x));
      }
      partial_bound = abs_sum;
      if (op == ReduceOp::sum) {
        tolerance = n * eps * abs_sum;
      } else {
        value /= n;
        tolerance = eps * abs_sum + eps * std::fabs(value);
      }
      break;
    }
    case ReduceOp::product:
      value = 1;
      partial_bound = 1;
      for (T x : inputs) {
        value *= to_long_double(x);
        partial_bound *= std::max(1.0L, std::fabs(to_long_double(x)));
      }
      tolerance = n * eps * std::fabs(value);
      break;
    case ReduceOp::min:
    case ReduceOp::max: {
      T best = inputs[0];
      for (T x : inputs) {
        const bool better = op == ReduceOp::min ? to_long_double(x) < to_long_double(best)
                                                : to_long_double(best) < to_long_double(x);
        if (better) best = x;
      }
      expected.exact = best;
      expected.is_exact = true;
      value = to_long_double(best);
      break;
    }
  }
  if (is_half_precision_v<T> && !expected.is_exact) {
    tolerance += half_ulp<T>(std::fabs(value) + tolerance);  // the final rounding to T
    // Algorithms that round every partial result to T (a ring over the network) add one
    // rounding per step, each at most half an ulp of the largest partial.
    for (int step = 1; step < roundings; ++step)
      tolerance += half_ulp<T>(partial_bound + tolerance);
  }
  expected.value = value;
  expected.tolerance = tolerance;
  return expected;
}

}  // namespace detail

/// The reference result of reducing `inputs` (rank 0 first) with `op`. `roundings`: how many
/// times the implementation under test may round a 16-bit float result to its type (1 when it
/// accumulates in float and rounds once).
template <Element T>
[[gnu::always_inline]] inline Expected<T> reference(std::span<const T> inputs, ReduceOp op,
                                                    int roundings = 1) {
  if constexpr (std::is_integral_v<T>) {
    return detail::integer_reference<T>(inputs, op);
  } else {
    return detail::floating_reference<T>(inputs, op, roundings);
  }
}

/// How a communicator rounds 16-bit floats: once at the end (in-process kernels reduce every
/// input in float), or after every step (message-passing algorithms send partial results in
/// the element type, as NCCL and Gloo do).
enum class Rounding { once, every_step };

/// True when `got` is an acceptable result for `expected`. Exact results compare by value (so
/// that -0 and +0 are equal, as min/max may pick either); NaN is never acceptable.
template <Element T>
[[gnu::always_inline]] inline bool matches(T got, const Expected<T>& expected) {
  if constexpr (std::is_integral_v<T>) {
    return got == expected.exact;
  } else {
    if (expected.is_exact) return to_long_double(got) == to_long_double(expected.exact);
    return std::fabs(to_long_double(got) - expected.value) <= expected.tolerance;
  }
}

template <Element T>
std::string describe(const Expected<T>& expected) {
  if (expected.is_exact) return format_value(expected.exact);
  return fmt::format("{} ± {:.3g}", static_cast<double>(expected.value),
                     static_cast<double>(expected.tolerance));
}

// ---- the team of rank threads ------------------------------------------------------------------

/// Creates the ranks of one group of `size` ranks. A runtime value rather than a type, so that
/// differently tuned groups of one communicator type share one instantiation of the runner.
template <class Comm>
using GroupFactory =
    std::function<std::vector<Comm>(int size, const communicator::CommunicatorOptions&)>;

/// `Comm::create(size, options)`.
template <class Comm>
GroupFactory<Comm> created_by_comm() {
  return [](int size, const communicator::CommunicatorOptions& options) {
    return Comm::create(size, options);
  };
}

/// The ranks of one group of `Comm`, made by `create` (by default `Comm::create(size, options)`),
/// each driven by a thread kept for the team's lifetime: rank 0 by the thread that calls `run`,
/// rank r > 0 by a helper thread.
template <class Comm>
class RankTeam {
 public:
  explicit RankTeam(int size, communicator::CommunicatorOptions options = {},
                    GroupFactory<Comm> create = created_by_comm<Comm>())
      : size_(size),
        options_(options),
        create_(std::move(create)),
        group_(create_(size, options)),
        barrier_(size) {
    for (int r = 1; r < size; ++r)
      helpers_.emplace_back([this, r] { serve(r); });
  }
  RankTeam(const RankTeam&) = delete;
  RankTeam& operator=(const RankTeam&) = delete;
  ~RankTeam() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    start_.notify_all();
    for (auto& helper : helpers_)
      helper.join();
  }

  int size() const noexcept { return size_; }
  Comm& operator[](int rank) { return group_[static_cast<std::size_t>(rank)]; }
  std::vector<Comm>& group() noexcept { return group_; }

  /// Runs `body(rank)` on every rank at once and waits for all; returns what each rank threw
  /// (null where it returned). Bodies may meet at `arrive_and_wait()`.
  std::vector<std::exception_ptr> run(const std::function<void(int)>& body) {
    {
      std::lock_guard lock(mutex_);
      job_ = &body;
      failures_.assign(static_cast<std::size_t>(size_), nullptr);
      pending_ = size_ - 1;
      ++generation_;
    }
    start_.notify_all();
    run_one(0, body);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    return failures_;
  }

  /// Runs `body(rank)` on every rank and rethrows the first rank's exception, if any.
  void run_or_throw(const std::function<void(int)>& body) {
    for (auto& failure : run(body))
      if (failure) std::rethrow_exception(failure);
  }

  /// A barrier of the team's threads (not of the communicator), for bodies that have phases.
  void arrive_and_wait() { barrier_.arrive_and_wait(); }

  /// Replaces the group by a fresh one, e.g. after a failure has poisoned it.
  void reset() { group_ = create_(size_, options_); }

 private:
  void run_one(int rank, const std::function<void(int)>& body) {
    std::exception_ptr failure;
    try {
      body(rank);
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    failures_[static_cast<std::size_t>(rank)] = failure;
  }

  void serve(int rank) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      run_one(rank, *job);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  int size_;
  communicator::CommunicatorOptions options_;
  GroupFactory<Comm> create_;
  std::vector<Comm> group_;
  std::barrier<> barrier_;
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  std::vector<std::exception_ptr> failures_;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

// ---- one case ----------------------------------------------------------------------------------

/// One collective call made by every rank of a group.
struct CaseSpec {
  Collective kind = Collective::all_reduce;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;  // reducing collectives only
  int size = 1;                 // world size
  std::size_t count = 0;        // per-rank count; the block for all_gather and reduce_scatter
  int root = 0;                 // broadcast and reduce only
  bool in_place = false;
  bool empty_non_root_recv = false;  // reduce out of place: non-roots pass an empty output
};

inline std::string describe(const CaseSpec& spec) {
  std::string text = fmt::format("{}(type={}, ", to_string(spec.kind), to_string(spec.type));
  if (communicator::reduces(spec.kind))
    fmt::format_to(std::back_inserter(text), "op={}, ", to_string(spec.op));
  fmt::format_to(std::back_inserter(text), "count={}, size={}", spec.count, spec.size);
  if (communicator::has_root(spec.kind))
    fmt::format_to(std::back_inserter(text), ", root={}", spec.root);
  text += spec.in_place ? ", in place" : ", out of place";
  if (spec.empty_non_root_recv) text += ", empty recv on non-roots";
  text += ')';
  return text;
}

/// The outcome of one case: exceptions per rank, and the elements that were wrong.
struct CaseResult {
  std::string case_name;
  std::vector<std::string> exceptions;  // "rank r threw: ..."
  std::size_t wrong = 0;                // nccl-tests' #wrong, over every rank
  std::string first_wrong;              // the first wrong element by (rank, index)

  bool ok() const noexcept { return exceptions.empty() && wrong == 0; }

  std::string message() const {
    std::string text = case_name;
    for (const auto& e : exceptions)
      fmt::format_to(std::back_inserter(text), "\n  {}", e);
    if (wrong > 0)
      fmt::format_to(std::back_inserter(text), "\n  #wrong {}; first: {}", wrong, first_wrong);
    return text;
  }
};

namespace detail {

/// Wrong elements seen by one checking thread; keeps the first by (rank, index).
struct Tally {
  std::size_t wrong = 0;
  int first_rank = std::numeric_limits<int>::max();
  std::size_t first_index = 0;
  std::string first;

  template <class What>
  void add(int rank, std::size_t index, What&& what) {
    ++wrong;
    if (rank < first_rank || (rank == first_rank && index < first_index)) {
      first_rank = rank;
      first_index = index;
      first = fmt::format("rank {}, {}", rank, what());
    }
  }

  void merge(const Tally& other) {
    wrong += other.wrong;
    if (other.wrong > 0 && (other.first_rank < first_rank ||
                            (other.first_rank == first_rank && other.first_index < first_index))) {
      first_rank = other.first_rank;
      first_index = other.first_index;
      first = other.first;
    }
  }
};

inline constexpr std::byte kSentinel{0xa5};
inline constexpr std::size_t kGuardBytes = 64;

/// One rank's storage: two regions (send, recv), each with guard bytes on both sides. Reused
/// across cases; grows, never shrinks.
class RankStorage {
 public:
  /// Returns the start of region `which` (0: send, 1: recv) with room for `bytes`, and fills its
  /// guards with the sentinel.
  std::byte* region(int which, std::size_t bytes) {
    auto& region = regions_[which];
    if (!region.memory || region.capacity < bytes) {
      region.memory.reset();  // release before allocating: large cases hold GiBs
      region.memory = std::make_unique_for_overwrite<std::byte[]>(bytes + 2 * kGuardBytes);
      region.capacity = bytes;
    }
    region.bytes = bytes;
    std::byte* data = region.memory.get() + kGuardBytes;
    std::memset(data - kGuardBytes, static_cast<int>(kSentinel), kGuardBytes);
    std::memset(data + bytes, static_cast<int>(kSentinel), kGuardBytes);
    return data;
  }

  /// Number of overwritten guard bytes of region `which` (after `region(which, ...)`).
  std::size_t damaged_guards(int which) const {
    const auto& region = regions_[which];
    if (!region.memory) return 0;
    const std::byte* data = region.memory.get() + kGuardBytes;
    std::size_t damaged = 0;
    for (std::size_t i = 0; i < kGuardBytes; ++i) {
      damaged += (data - kGuardBytes)[i] != kSentinel;
      damaged += data[region.bytes + i] != kSentinel;
    }
    return damaged;
  }

 private:
  struct Region {
    std::unique_ptr<std::byte[]> memory;
    std::size_t capacity = 0;
    std::size_t bytes = 0;
  };
  Region regions_[2];
};

template <Element T>
T sentinel_value() {
  T value;
  std::memset(static_cast<void*>(&value), static_cast<int>(kSentinel), sizeof(T));
  return value;
}

/// Element range [begin, end) of part `part` of `total` split into `parts`.
inline std::pair<std::size_t, std::size_t> part_of(std::size_t total, int parts, int part) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(part);
  return {total / p * i + std::min(i, total % p), total / p * (i + 1) + std::min(i + 1, total % p)};
}

}  // namespace detail

/// Runs conformance cases on groups of `Comm` of any world size. Teams (threads and groups) are
/// created on first use per world size and kept; buffers are shared by all of them and freed
/// with the runner.
template <class Comm>
class ConformanceRunner {
 public:
  /// `name` appears in messages, e.g. "local<scatter_gather>".
  explicit ConformanceRunner(std::string name, communicator::CommunicatorOptions options = {},
                             Rounding rounding = Rounding::once,
                             GroupFactory<Comm> create = created_by_comm<Comm>())
      : name_(std::move(name)),
        options_(options),
        rounding_(rounding),
        create_(std::move(create)) {}

  RankTeam<Comm>& team(int size) {
    if (teams_.size() < static_cast<std::size_t>(size) + 1)
      teams_.resize(static_cast<std::size_t>(size) + 1);
    auto& team = teams_[static_cast<std::size_t>(size)];
    if (!team) team = std::make_unique<RankTeam<Comm>>(size, options_, create_);
    return *team;
  }

  /// Runs one case and checks it; the group is re-created if the case failed it.
  CaseResult run(const CaseSpec& spec) {
    return visit_data_type(spec.type,
                           [&]<class T>(std::type_identity<T>) { return run_typed<T>(spec); });
  }

 private:
  template <Element T>
  struct Layout {
    std::vector<T*> in;   // rank r's input: its send buffer, or its in-place buffer
    std::vector<T*> out;  // rank r's output: its recv buffer, or its block of the in-place buffer
    std::vector<std::size_t> in_count;
    std::vector<std::size_t> out_count;
    std::vector<std::size_t> buffer_count;  // the in-place buffer (in place only)
  };

  template <Element T>
  CaseResult run_typed(const CaseSpec& spec) {
    RankTeam<Comm>& team = this->team(spec.size);
    const int n = spec.size;
    const auto un = static_cast<std::size_t>(n);
    if (storage_.size() < un) storage_.resize(un);
    Layout<T> layout;
    layout.in.resize(un);
    layout.out.resize(un);
    layout.in_count.resize(un);
    layout.out_count.resize(un);
    layout.buffer_count.resize(un);
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      std::size_t in_count = spec.count;
      std::size_t out_count = spec.count;
      if (spec.kind == Collective::all_gather) out_count = un * spec.count;
      if (spec.kind == Collective::reduce_scatter) in_count = un * spec.count;
      if (spec.kind == Collective::reduce && spec.empty_non_root_recv && r != spec.root)
        out_count = 0;
      layout.in_count[ur] = in_count;
      layout.out_count[ur] = out_count;
      if (spec.in_place) {
        const std::size_t buffer = std::max(in_count, out_count);
        T* data = reinterpret_cast<T*>(storage_[ur].region(0, buffer * sizeof(T)));
        layout.buffer_count[ur] = buffer;
        layout.in[ur] = data;
        layout.out[ur] = data;
        if (spec.kind == Collective::all_gather) layout.in[ur] = data + ur * spec.count;
        if (spec.kind == Collective::reduce_scatter) layout.out[ur] = data + ur * spec.count;
      } else {
        layout.in[ur] = reinterpret_cast<T*>(storage_[ur].region(0, in_count * sizeof(T)));
        layout.out[ur] = reinterpret_cast<T*>(storage_[ur].region(1, out_count * sizeof(T)));
      }
    }

    std::vector<std::string> thrown(un);
    std::vector<detail::Tally> tallies(un);
    auto body = [&](int rank) {
      const auto ur = static_cast<std::size_t>(rank);
      try {
        prepare<T>(spec, layout, rank);
        call<T>(team[rank], spec, layout, rank);
      } catch (const std::exception& error) {
        thrown[ur] = fmt::format("rank {} threw: {}", rank, error.what());
      } catch (...) {
        thrown[ur] = fmt::format("rank {} threw a non-std exception", rank);
      }
      team.arrive_and_wait();  // every rank's call has returned: outputs are final
      bool any_thrown = false;
      for (const auto& t : thrown)
        any_thrown = any_thrown || !t.empty();
      if (!any_thrown) check<T>(spec, layout, rank, tallies[ur]);
    };
    const auto failures = team.run(body);

    CaseResult result;
    result.case_name = fmt::format("{} {}", name_, describe(spec));
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (!thrown[ur].empty()) result.exceptions.push_back(thrown[ur]);
      if (failures[ur]) result.exceptions.push_back(fmt::format("rank {}: harness failure", r));
    }
    detail::Tally total;
    for (const auto& tally : tallies)
      total.merge(tally);
    result.wrong = total.wrong;
    result.first_wrong = total.first;
    if (!result.exceptions.empty()) team.reset();
    return result;
  }

  // Fills rank `rank`'s buffers: inputs, and the sentinel where outputs go.
  template <Element T>
  static void prepare(const CaseSpec& spec, const Layout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    const T sentinel = detail::sentinel_value<T>();
    if (spec.in_place && spec.kind == Collective::all_gather) {
      // Only the own block holds input; the others must be overwritten.
      std::fill_n(buffer_of(spec, layout, rank), layout.buffer_count[ur], sentinel);
      for (std::size_t i = 0; i < spec.count; ++i)
        layout.in[ur][i] = input_value<T>(rank, i, spec.op);
    } else if (spec.in_place) {
      for (std::size_t i = 0; i < layout.buffer_count[ur]; ++i)
        layout.in[ur][i] = input_value<T>(rank, i, spec.op);
    } else {
      for (std::size_t i = 0; i < layout.in_count[ur]; ++i)
        layout.in[ur][i] = input_value<T>(rank, i, spec.op);
      std::fill_n(layout.out[ur], layout.out_count[ur], sentinel);
    }
  }

  // The start of rank `rank`'s in-place buffer.
  template <Element T>
  static T* buffer_of(const CaseSpec& spec, const Layout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    return spec.kind == Collective::all_gather ? layout.in[ur] - ur * spec.count : layout.in[ur];
  }

  template <Element T>
  static void call(Comm& comm, const CaseSpec& spec, const Layout<T>& layout, int rank) {
    const auto ur = static_cast<std::size_t>(rank);
    if (spec.in_place) {
      const std::span<T> data(buffer_of(spec, layout, rank), layout.buffer_count[ur]);
      switch (spec.kind) {
        case Collective::all_reduce:
          comm.all_reduce(data, spec.op);
          break;
        case Collective::broadcast:
          comm.broadcast(data, spec.root);
          break;
        case Collective::reduce:
          comm.reduce(data, spec.op, spec.root);
          break;
        case Collective::all_gather:
          comm.all_gather(data);
          break;
        case Collective::reduce_scatter:
          comm.reduce_scatter(data, spec.op);
          break;
        case Collective::barrier:
          comm.barrier();
          break;
      }
      return;
    }
    const std::span<const T> send(layout.in[ur], layout.in_count[ur]);
    const std::span<T> recv(layout.out[ur], layout.out_count[ur]);
    switch (spec.kind) {
      case Collective::all_reduce:
        comm.all_reduce(send, recv, spec.op);
        break;
      case Collective::broadcast:
        comm.broadcast(send, recv, spec.root);
        break;
      case Collective::reduce:
        comm.reduce(send, recv, spec.op, spec.root);
        break;
      case Collective::all_gather:
        comm.all_gather(send, recv);
        break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(send, recv, spec.op);
        break;
      case Collective::barrier:
        comm.barrier();
        break;
    }
  }

  // Checks part `rank` of the case's index space on every rank's buffers, and this rank's guards.
  template <Element T>
  void check(const CaseSpec& spec, const Layout<T>& layout, int rank, detail::Tally& tally) {
    const int n = spec.size;
    const auto un = static_cast<std::size_t>(n);
    const std::size_t count = spec.count;
    const bool scattered =
        spec.kind == Collective::all_gather || spec.kind == Collective::reduce_scatter;
    const auto [begin, end] = detail::part_of(scattered ? un * count : count, n, rank);
    const T sentinel = detail::sentinel_value<T>();
    T inputs[kMaxRanks];

    // Out-of-place inputs must be unchanged; `q`'s input at `i` was input_value(q, i).
    auto check_input = [&](int q, std::size_t i, T expected) __attribute__((always_inline)) {
      if (spec.in_place) return;
      const T got = layout.in[static_cast<std::size_t>(q)][i];
      if (!same_bits(got, expected))
        tally.add(q, i, [&] {
          return fmt::format("send[{}] was modified: {} instead of {}", i, format_value(got),
                             format_value(expected));
        });
    };
    auto gather_inputs = [&](std::size_t i) __attribute__((always_inline)) {
      for (int q = 0; q < n; ++q) {
        inputs[q] = input_value<T>(q, i, spec.op);
        check_input(q, i, inputs[q]);
      }
      return std::span<const T>(inputs, un);
    };
    auto report = [&](int q, std::size_t i, T got, const std::string& expected,
                      std::string_view why) {
      tally.add(q, i, [&] {
        return fmt::format("output[{}]: got {}, expected {}{}", i, format_value(got), expected,
                           why);
      });
    };
    // Every rank's output at `i` must match; ranks other than 0 must also have rank 0's bits.
    auto check_all_ranks = [&](std::size_t i, const auto& acceptable, const auto& expected_text)
        __attribute__((always_inline)) {
      const T first = layout.out[0][i];
      const bool first_ok = acceptable(first);
      if (!first_ok) report(0, i, first, expected_text(), "");
      for (int q = 1; q < n; ++q) {
        const T got = layout.out[static_cast<std::size_t>(q)][i];
        if (same_bits(got, first)) {
          if (!first_ok) report(q, i, got, expected_text(), "");
        } else {
          report(q, i, got, expected_text(),
                 fmt::format(" (and rank 0 has {}: results must be bit-identical on every rank)",
                             format_value(first)));
        }
      }
    };

    switch (spec.kind) {
      case Collective::all_reduce:
        for (std::size_t i = begin; i < end; ++i) {
          const auto expected = reference<T>(gather_inputs(i), spec.op, roundings(spec));
          check_all_ranks(
              i, [&](T got) { return matches(got, expected); }, [&] { return describe(expected); });
        }
        break;
      case Collective::broadcast:
        for (std::size_t i = begin; i < end; ++i) {
          const T expected = input_value<T>(spec.root, i, spec.op);
          if (!spec.in_place)
            for (int q = 0; q < n; ++q)
              check_input(q, i, input_value<T>(q, i, spec.op));
          check_all_ranks(
              i, [&](T got) { return same_bits(got, expected); },
              [&] { return format_value(expected); });
        }
        break;
      case Collective::reduce:
        for (std::size_t i = begin; i < end; ++i) {
          const auto expected = reference<T>(gather_inputs(i), spec.op, roundings(spec));
          for (int q = 0; q < n; ++q) {
            const auto uq = static_cast<std::size_t>(q);
            if (q == spec.root) {
              const T got = layout.out[uq][i];
              if (!matches(got, expected)) report(q, i, got, describe(expected), "");
            } else if (spec.in_place) {
              const T got = layout.out[uq][i];
              if (!same_bits(got, inputs[q]))
                report(q, i, got, format_value(inputs[q]),
                       " (a non-root's buffer must be untouched)");
            } else if (layout.out_count[uq] > 0) {
              const T got = layout.out[uq][i];
              if (!same_bits(got, sentinel))
                report(q, i, got, format_value(sentinel), " (a non-root's recv must be untouched)");
            }
          }
        }
        break;
      case Collective::all_gather:
        for (std::size_t j = begin; j < end; ++j) {
          const int block = static_cast<int>(j / count);
          const std::size_t i = j % count;
          const T expected = input_value<T>(block, i, spec.op);
          check_input(block, i, expected);
          check_all_ranks(
              j, [&](T got) { return same_bits(got, expected); },
              [&] { return format_value(expected); });
        }
        break;
      case Collective::reduce_scatter:
        for (std::size_t j = begin; j < end; ++j) {
          const auto expected = reference<T>(gather_inputs(j), spec.op, roundings(spec));
          const auto owner = j / count;
          const T got = layout.out[owner][j - owner * count];
          if (!matches(got, expected))
            report(static_cast<int>(owner), j - owner * count, got, describe(expected), "");
        }
        break;
      case Collective::barrier:
        break;
    }

    // This rank's guard bytes.
    const auto& storage = storage_[static_cast<std::size_t>(rank)];
    for (int which = 0; which < (spec.in_place ? 1 : 2); ++which) {
      if (const std::size_t damaged = storage.damaged_guards(which))
        tally.add(rank, std::numeric_limits<std::size_t>::max(), [&] {
          return fmt::format("{} guard bytes around its {} buffer were overwritten", damaged,
                             spec.in_place ? "in-place"
                             : which == 0  ? "send"
                                           : "recv");
        });
    }
  }

 public:
  /// The largest world size the runner checks (the reference keeps inputs on the stack).
  static constexpr int kMaxRanks = 64;

 private:
  int roundings(const CaseSpec& spec) const noexcept {
    // n-1 combines and the division of a mean.
    return rounding_ == Rounding::every_step ? spec.size + 1 : 1;
  }

  std::string name_;
  communicator::CommunicatorOptions options_;
  Rounding rounding_;
  GroupFactory<Comm> create_;
  std::vector<std::unique_ptr<RankTeam<Comm>>> teams_;
  std::vector<detail::RankStorage> storage_;
};

// ---- the sweep plan ----------------------------------------------------------------------------

inline constexpr DataType kAllDataTypes[] = {
    DataType::int8,    DataType::uint8,    DataType::int32,   DataType::int64,
    DataType::float16, DataType::bfloat16, DataType::float32, DataType::float64};
inline constexpr std::size_t kSmallCounts[] = {0, 1, 7, 1023};
inline constexpr std::size_t kMediumCount = (std::size_t{1} << 20) + 3;
inline constexpr std::size_t kLargeCount = std::size_t{16} << 20;
inline constexpr int kMaxWorldSize = 8;

namespace detail {

inline std::vector<ReduceOp> ops_of(Collective kind) {
  if (!communicator::reduces(kind)) return {ReduceOp::sum};
  return {std::begin(kAllReduceOps), std::end(kAllReduceOps)};
}

/// Roots tried for every (size, count, type, op, placement): every rank for broadcast; the
/// first, middle and last rank for reduce.
inline std::vector<int> roots_of(Collective kind, int size) {
  if (kind == Collective::broadcast) {
    std::vector<int> roots(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r)
      roots[static_cast<std::size_t>(r)] = r;
    return roots;
  }
  if (kind == Collective::reduce) {
    std::vector<int> roots{0};
    if (size / 2 != 0) roots.push_back(size / 2);
    if (size - 1 != size / 2 && size > 1) roots.push_back(size - 1);
    return roots;
  }
  return {0};
}

/// all_gather's and reduce_scatter's count is a per-rank block, so their buffers hold size·count
/// elements; at large counts the block is scaled to count / size to keep memory bounded.
inline std::size_t block_count(Collective kind, std::size_t count, int size) {
  const bool scattered = kind == Collective::all_gather || kind == Collective::reduce_scatter;
  if (!scattered || count < kMediumCount) return count;
  return count / static_cast<std::size_t>(size);
}

inline void add_product(std::vector<CaseSpec>& cases, Collective kind, std::size_t count) {
  for (int size = 1; size <= kMaxWorldSize; ++size)
    for (DataType type : kAllDataTypes)
      for (ReduceOp op : ops_of(kind))
        for (int root : roots_of(kind, size))
          for (bool in_place : {false, true}) {
            CaseSpec spec{kind, type, op, size, block_count(kind, count, size), root, in_place};
            // Reduce out of place: non-roots alternate between no output and an untouched one.
            spec.empty_non_root_recv =
                kind == Collective::reduce && !in_place && (root + size) % 2 == 1;
            cases.push_back(spec);
          }
}

}  // namespace detail

/// The conformance cases of collective `kind` at the small counts {0, 1, 7, 1023}: the full
/// product of world sizes 1..8 × element types × ops × roots × in/out of place.
inline std::vector<CaseSpec> small_count_cases(Collective kind) {
  std::vector<CaseSpec> cases;
  for (std::size_t count : kSmallCounts)
    detail::add_product(cases, kind, count);
  return cases;
}

/// Under the sanitizer presets (Sweep::quick) a fixed pseudo-random quarter of `cases` (a
/// hash of the index, not a stride, which would line up with the product's dimensions);
/// otherwise all of them. For communicators whose cases are latency-bound (TCP), where the
/// full product is slow under sanitizers.
inline std::vector<CaseSpec> thinned_when_quick(std::vector<CaseSpec> cases) {
  if (sweep_from_environment() != Sweep::quick) return cases;
  std::vector<CaseSpec> kept;
  for (std::size_t i = 0; i < cases.size(); ++i)
    if (mix64(i) % 4 == 0) kept.push_back(cases[i]);
  return kept;
}

/// The conformance cases of collective `kind` at the large counts 2^20+3 and 16 Mi:
///   standard  every (op, type) once per count, world size rotating over 1..8 (offset by
///             `rotation`, so that sibling algorithms meet other sizes) and in/out of place
///             alternating, roots rotating; plus world size 8, float, sum, per count;
///   quick     the same at 2^20+3 only;
///   full      the complete product, as at small counts.
/// all_gather and reduce_scatter use a block of count / size (see `block_count`).
inline std::vector<CaseSpec> large_count_cases(Collective kind, Sweep sweep, int rotation = 0) {
  std::vector<std::size_t> counts{kMediumCount};
  if (sweep != Sweep::quick) counts.push_back(kLargeCount);
  std::vector<CaseSpec> cases;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    if (sweep == Sweep::full) {
      detail::add_product(cases, kind, counts[c]);
      continue;
    }
    int k = 0;
    for (ReduceOp op : detail::ops_of(kind))
      for (DataType type : kAllDataTypes) {
        const int rot = k + rotation + 3 * static_cast<int>(c);
        const int size = 1 + rot % kMaxWorldSize;
        CaseSpec spec{kind, type, op, size, detail::block_count(kind, counts[c], size)};
        spec.in_place = (k + k / kMaxWorldSize + static_cast<int>(c)) % 2 == 1;
        spec.root = communicator::has_root(kind) ? (2 * k + 1 + static_cast<int>(c)) % size : 0;
        spec.empty_non_root_recv = kind == Collective::reduce && !spec.in_place && k % 3 == 0;
        cases.push_back(spec);
        ++k;
      }
    CaseSpec eight{kind, DataType::float32, ReduceOp::sum, kMaxWorldSize,
                   detail::block_count(kind, counts[c], kMaxWorldSize)};
    eight.in_place = c % 2 == 1;
    eight.root = communicator::has_root(kind) ? kMaxWorldSize - 1 - static_cast<int>(c) : 0;
    cases.push_back(eight);
  }
  return cases;
}

/// What a sweep found: how many cases ran and failed, and the messages of the first failures.
struct SweepSummary {
  std::size_t cases = 0;
  std::size_t failed = 0;
  std::size_t wrong = 0;  // wrong elements over every failed case
  std::vector<std::string> messages;
};

/// Runs `cases` in order; keeps the messages of the first `max_messages` failures.
template <class Comm>
SweepSummary run_cases(ConformanceRunner<Comm>& runner, std::span<const CaseSpec> cases,
                       std::size_t max_messages = 20) {
  SweepSummary summary;
  for (const CaseSpec& spec : cases) {
    const CaseResult result = runner.run(spec);
    ++summary.cases;
    if (result.ok()) continue;
    ++summary.failed;
    summary.wrong += result.wrong;
    if (summary.messages.size() < max_messages) summary.messages.push_back(result.message());
  }
  return summary;
}

}  // namespace strata::testing
