// Tests for strata/core/reduce.hpp: every element type x every op x sizes around the block
// size x input counts x in-place/out-of-place, against references computed independently in
// wider arithmetic (exact for integers, long double with a stated bound for floating point).
#include <strata/core/reduce.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "sweep_plan.hpp"

template <>
struct doctest::StringMaker<strata::ReduceOp> {
  static String convert(strata::ReduceOp op) { return fmt::format("{}", op).c_str(); }
};
template <>
struct doctest::StringMaker<strata::DataType> {
  static String convert(strata::DataType type) { return fmt::format("{}", type).c_str(); }
};

namespace {

using strata::bfloat16;
using strata::float16;
using strata::ReduceOp;

__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

template <class List>
struct AsTuple;
template <class... Ts>
struct AsTuple<strata::TypeList<Ts...>> {
  using type = std::tuple<Ts...>;
};
using AllElementTypes = AsTuple<strata::ElementTypes>::type;

template <class T>
constexpr bool kHalf = strata::is_half_precision_v<T>;

// The largest count spans many blocks and cache lines; the quick sweep (CI, the sanitizer
// presets) takes a smaller prime for it, a fifth of the work at the same block boundaries.
const std::vector<std::size_t>& sizes_to_sweep() {
  static const std::vector<std::size_t> sizes = [] {
    const bool quick = strata::testing::sweep_from_environment() == strata::testing::Sweep::quick;
    return std::vector<std::size_t>{0, 1, 7, 1023, 1024, 1025, 4099, quick ? 20011u : 100003u};
  }();
  return sizes;
}
constexpr std::size_t kInputCounts[] = {1, 2, 3, 5, 8};
constexpr std::size_t kMaxInputs = 8;

template <class T>
std::uint64_t bits_of(T value) {
  if constexpr (kHalf<T>) {
    return value.bits();
  } else {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    return bits;
  }
}

template <class T>
long double to_long_double(T value) {
  if constexpr (kHalf<T>) {
    return static_cast<float>(value);
  } else {
    return static_cast<long double>(value);
  }
}

template <class T>
T from_float(float value) {
  if constexpr (kHalf<T>) {
    return T(value);
  } else {
    return static_cast<T>(value);
  }
}

// Integers cover their whole range, so sums and products wrap. Floating-point sums use
// [-100, 100); products use magnitudes in [0.5, 2) so 8 factors neither overflow nor underflow.
template <class T>
std::vector<T> random_input(std::size_t count, ReduceOp op, std::mt19937_64& rng) {
  std::vector<T> values(count);
  if constexpr (std::is_integral_v<T>) {
    std::uniform_int_distribution<std::int64_t> dist(std::numeric_limits<T>::min(),
                                                     std::numeric_limits<T>::max());
    for (auto& v : values)
      v = static_cast<T>(dist(rng));
  } else if (op == ReduceOp::product) {
    std::uniform_real_distribution<float> magnitude(0.5f, 2.0f);
    std::bernoulli_distribution negative(0.5);
    for (auto& v : values)
      v = from_float<T>(negative(rng) ? -magnitude(rng) : magnitude(rng));
  } else {
    std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
    for (auto& v : values)
      v = from_float<T>(dist(rng));
  }
  return values;
}

// The exact integer result: wider arithmetic (modulo 2^128), then a modular conversion.
template <class T>
T integer_reference(const std::vector<const T*>& inputs, std::size_t i, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  const auto n = static_cast<Int128>(inputs.size());
  switch (op) {
    case ReduceOp::min:
    case ReduceOp::max: {
      T best = inputs[0][i];
      for (const T* in : inputs)
        best = op == ReduceOp::min ? std::min(best, in[i]) : std::max(best, in[i]);
      return best;
    }
    case ReduceOp::product: {
      UInt128 product = 1;
      for (const T* in : inputs)
        product *= static_cast<UInt128>(static_cast<Int128>(in[i]));
      return static_cast<T>(static_cast<U>(product));
    }
    case ReduceOp::sum:
    case ReduceOp::mean:
      break;
  }
  UInt128 sum = 0;
  for (const T* in : inputs)
    sum += static_cast<UInt128>(static_cast<Int128>(in[i]));
  const auto wrapped = static_cast<T>(static_cast<U>(sum));
  if (op == ReduceOp::sum) return wrapped;
  return static_cast<T>(static_cast<Int128>(wrapped) / n);  // C++ division truncates toward 0
}

// One unit in the last place of T at magnitude `value` (16-bit types only).
template <class T>
long double ulp_of(long double value) {
  constexpr int kMantissaBits = std::is_same_v<T, float16> ? 10 : 7;
  constexpr int kMinExponent = std::is_same_v<T, float16> ? -24 : -133;
  int exponent = 0;
  std::frexp(value, &exponent);  // value = m * 2^exponent, m in [0.5, 1)
  return std::ldexp(1.0L, std::max(exponent - 1 - kMantissaBits, kMinExponent));
}

struct FloatReference {
  long double value;
  long double tolerance;
};

// The floating-point result in long double and the bound the kernel must meet. With
// eps = epsilon of the accumulation type (float for 16-bit types) and n inputs:
//   sum      |got - ref| <= n * eps * sum|x_i|
//   mean     |got - ref| <= eps * sum|x_i| + eps * |ref|        (the sum's bound / n, + division)
//   product  |got - ref| <= n * eps * |ref|
//   min/max  exact
// and 16-bit types add 0.5 ulp of T for their single final rounding.
template <class T>
FloatReference float_reference(const std::vector<const T*>& inputs, std::size_t i, ReduceOp op) {
  using Acc = strata::detail::ReduceAcc<T>;
  const long double eps = std::numeric_limits<Acc>::epsilon();
  const auto n = static_cast<long double>(inputs.size());
  long double sum = 0, sum_abs = 0, product = 1;
  long double lowest = to_long_double(inputs[0][i]), highest = lowest;
  for (const T* in : inputs) {
    const long double x = to_long_double(in[i]);
    sum += x;
    sum_abs += std::fabs(x);
    product *= x;
    lowest = std::min(lowest, x);
    highest = std::max(highest, x);
  }
  switch (op) {
    case ReduceOp::sum:
      return {sum, n * eps * sum_abs};
    case ReduceOp::mean:
      return {sum / n, eps * sum_abs + eps * std::fabs(sum / n)};
    case ReduceOp::product:
      return {product, n * eps * std::fabs(product)};
    case ReduceOp::min:
      return {lowest, 0};
    case ReduceOp::max:
      return {highest, 0};
  }
  return {0, 0};
}

// Empty when every element of `got` matches the reference; otherwise describes the first miss.
template <class T>
std::string check_against_reference(std::span<const T> got, const std::vector<const T*>& inputs,
                                    ReduceOp op) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      const T want = integer_reference(inputs, i, op);
      if (got[i] != want) {
        return fmt::format("element {}: got {} want {}", i, static_cast<std::int64_t>(got[i]),
                           static_cast<std::int64_t>(want));
      }
    } else {
      const FloatReference ref = float_reference(inputs, i, op);
      const long double value = to_long_double(got[i]);
      long double tolerance = ref.tolerance;
      if constexpr (kHalf<T>) {
        if (op != ReduceOp::min && op != ReduceOp::max) {
          tolerance += 0.5L * ulp_of<T>(std::max(std::fabs(ref.value), std::fabs(value)));
        }
      }
      if (!(std::fabs(value - ref.value) <= tolerance)) {
        return fmt::format("element {}: got {} want {} (tolerance {})", i,
                           static_cast<double>(value), static_cast<double>(ref.value),
                           static_cast<double>(tolerance));
      }
    }
  }
  return {};
}

// Empty when `same` holds for every pair of elements; otherwise describes the first that differ.
template <class T, class Same>
std::string first_difference(std::span<const T> a, std::span<const T> b, Same same) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same(a[i], b[i])) {
      return fmt::format("element {}: {:#x} vs {:#x}", i, bits_of(a[i]), bits_of(b[i]));
    }
  }
  return {};
}

template <class T>
std::string first_bit_difference(std::span<const T> a, std::span<const T> b) {
  return first_difference<T>(a, b, [](T x, T y) { return bits_of(x) == bits_of(y); });
}

// As first_bit_difference, but any NaN matches any NaN: when two NaNs meet, IEEE 754 leaves
// open which one's payload the result carries, and code of different vector widths differs.
template <class T>
std::string first_difference_but_nan_payload(std::span<const T> a, std::span<const T> b) {
  return first_difference<T>(a, b, [](T x, T y) {
    if constexpr (std::is_integral_v<T>) {
      return x == y;
    } else {
      return bits_of(x) == bits_of(y) ||
             (std::isnan(to_long_double(x)) && std::isnan(to_long_double(y)));
    }
  });
}

enum class Placement { out_of_place, in_place_first, in_place_last };

std::string to_string(Placement placement) {
  switch (placement) {
    case Placement::out_of_place:
      return "out-of-place";
    case Placement::in_place_first:
      return "in-place (out == inputs[0])";
    case Placement::in_place_last:
      return "in-place (out == inputs[last])";
  }
  return "?";
}

// Runs reduce_n with the given placement; the inputs themselves are never modified.
template <class T>
std::vector<T> run_reduce_n(const std::vector<const T*>& inputs, std::size_t count, ReduceOp op,
                            Placement placement) {
  std::vector<T> out(count, from_float<T>(-7.0f));  // junk that must be overwritten
  std::vector<const T*> pointers = inputs;
  if (placement != Placement::out_of_place) {
    const std::size_t j = placement == Placement::in_place_first ? 0 : inputs.size() - 1;
    if (count > 0) std::memcpy(out.data(), inputs[j], count * sizeof(T));
    pointers[j] = out.data();
  }
  strata::reduce_n<T>(out, pointers, op);
  return out;
}

TEST_CASE_TEMPLATE_DEFINE("reduce_n matches an independent reference", T, reduce_sweep) {
  std::mt19937_64 rng(20240601);
  for (const std::size_t count : sizes_to_sweep()) {
    for (const ReduceOp op : strata::kAllReduceOps) {
      std::vector<std::vector<T>> storage;
      for (std::size_t j = 0; j < kMaxInputs; ++j)
        storage.push_back(random_input<T>(count, op, rng));
      for (const std::size_t n : kInputCounts) {
        std::vector<const T*> inputs;
        for (std::size_t j = 0; j < n; ++j)
          inputs.push_back(storage[j].data());
        std::vector<T> out_of_place;
        for (const Placement placement :
             {Placement::out_of_place, Placement::in_place_first, Placement::in_place_last}) {
          CAPTURE(count);
          CAPTURE(op);
          CAPTURE(n);
          CAPTURE(to_string(placement));
          const std::vector<T> got = run_reduce_n(inputs, count, op, placement);
          CHECK(check_against_reference<T>(got, inputs, op) == "");
          // Same bits however the output is placed: every rank of a collective must agree.
          if (placement == Placement::out_of_place) {
            out_of_place = got;
          } else {
            CHECK(first_bit_difference<T>(got, out_of_place) == "");
          }
        }
      }
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(reduce_sweep, AllElementTypes);

TEST_CASE_TEMPLATE_DEFINE("reduce_n: bits do not depend on the count or on repeated pointers", T,
                          reduce_structure) {
  std::mt19937_64 rng(7);
  constexpr std::size_t kCount = 5000;
  std::vector<std::vector<T>> storage;
  for (int j = 0; j < 5; ++j)
    storage.push_back(random_input<T>(kCount, ReduceOp::sum, rng));
  std::vector<const T*> inputs;
  for (const auto& s : storage)
    inputs.push_back(s.data());

  for (const ReduceOp op : strata::kAllReduceOps) {
    CAPTURE(op);
    const std::vector<T> full = run_reduce_n(inputs, kCount, op, Placement::out_of_place);
    // A prefix reduces to the prefix of the result, whatever the block boundaries.
    for (const std::size_t prefix : {std::size_t{1}, std::size_t{999}, std::size_t{2049}}) {
      const std::vector<T> part = run_reduce_n(inputs, prefix, op, Placement::out_of_place);
      CHECK(first_bit_difference<T>(part, std::span<const T>(full).first(prefix)) == "");
    }
    // The same pointer may appear several times, and out may be several of the inputs.
    std::vector<T> out = storage[0];
    const T* const repeated[] = {out.data(), storage[1].data(), out.data(), storage[1].data()};
    strata::reduce_n<T>(out, repeated, op);
    const std::vector<const T*> separate = {storage[0].data(), storage[1].data(), storage[0].data(),
                                            storage[1].data()};
    CHECK(first_bit_difference<T>(
              out, run_reduce_n(separate, kCount, op, Placement::out_of_place)) == "");
    std::vector<T> both = storage[0];
    const T* const twice[] = {both.data(), both.data()};
    strata::reduce_n<T>(both, twice, op);
    const std::vector<const T*> separate_twice = {storage[0].data(), storage[0].data()};
    CHECK(first_bit_difference<T>(
              both, run_reduce_n(separate_twice, kCount, op, Placement::out_of_place)) == "");
  }
}
TEST_CASE_TEMPLATE_APPLY(reduce_structure, AllElementTypes);

TEST_CASE_TEMPLATE_DEFINE("accumulate is the two-input reduce_n, mean acting as sum", T,
                          accumulate_sweep) {
  std::mt19937_64 rng(99);
  for (const std::size_t count : sizes_to_sweep()) {
    for (const ReduceOp op : strata::kAllReduceOps) {
      CAPTURE(count);
      CAPTURE(op);
      const std::vector<T> a = random_input<T>(count, op, rng);
      const std::vector<T> b = random_input<T>(count, op, rng);
      const ReduceOp as = op == ReduceOp::mean ? ReduceOp::sum : op;
      std::vector<T> inout = a;
      strata::accumulate<T>(inout, b, op);
      const std::vector<const T*> inputs = {a.data(), b.data()};
      CHECK(check_against_reference<T>(inout, inputs, as) == "");
      CHECK(first_bit_difference<T>(
                inout, run_reduce_n(inputs, count, as, Placement::out_of_place)) == "");
      // Exactly equal spans are accepted: x op x.
      std::vector<T> self = a;
      strata::accumulate<T>(self, self, op);
      const std::vector<const T*> twice = {a.data(), a.data()};
      CHECK(first_bit_difference<T>(self,
                                    run_reduce_n(twice, count, as, Placement::out_of_place)) == "");
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(accumulate_sweep, AllElementTypes);

TEST_CASE_TEMPLATE_DEFINE("divide finishes a mean; reduce_n's mean equals sum then divide", T,
                          divide_sweep) {
  std::mt19937_64 rng(5);
  for (const std::size_t count : sizes_to_sweep()) {
    CAPTURE(count);
    const std::vector<T> a = random_input<T>(count, ReduceOp::sum, rng);
    for (const std::size_t divisor : {std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
      CAPTURE(divisor);
      std::vector<T> data = a;
      strata::divide<T>(data, divisor);
      std::string miss;
      for (std::size_t i = 0; i < count && miss.empty(); ++i) {
        T want{};
        if constexpr (std::is_integral_v<T>) {
          want =
              static_cast<T>(static_cast<std::int64_t>(a[i]) / static_cast<std::int64_t>(divisor));
        } else if constexpr (kHalf<T>) {
          want = T(static_cast<float>(a[i]) / static_cast<float>(divisor));
        } else {
          want = a[i] / static_cast<T>(divisor);
        }
        if (bits_of(data[i]) != bits_of(want)) miss = fmt::format("element {}", i);
      }
      CHECK(miss == "");
    }
    if constexpr (!kHalf<T>) {
      // 16-bit types divide before their single rounding instead; the sweep covers them.
      const std::vector<T> b = random_input<T>(count, ReduceOp::sum, rng);
      const std::vector<T> c = random_input<T>(count, ReduceOp::sum, rng);
      const std::vector<const T*> inputs = {a.data(), b.data(), c.data()};
      std::vector<T> sum = run_reduce_n(inputs, count, ReduceOp::sum, Placement::out_of_place);
      strata::divide<T>(sum, 3);
      CHECK(first_bit_difference<T>(
                sum, run_reduce_n(inputs, count, ReduceOp::mean, Placement::out_of_place)) == "");
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(divide_sweep, AllElementTypes);

// The instruction sets this CPU runs the kernels with, baseline first.
std::vector<strata::detail::Isa> isas_here() {
  std::vector<strata::detail::Isa> isas;
  for (const auto isa : strata::detail::kAllIsas)
    if (isa <= strata::detail::best_isa()) isas.push_back(isa);
  return isas;
}

// Floating-point inputs with infinities, NaNs, signed zeros, subnormals and extremes mixed in;
// 16-bit types get every bit pattern in turn, so that each conversion case meets each set.
template <class T>
void mix_in_special_values(std::vector<T>& values, std::mt19937_64& rng) {
  if constexpr (kHalf<T>) {
    const auto offset = static_cast<std::uint32_t>(rng());
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = T::from_bits(static_cast<std::uint16_t>(offset + i * 40503u));
  } else if constexpr (std::is_floating_point_v<T>) {
    using L = std::numeric_limits<T>;
    const T special[] = {L::infinity(),   -L::infinity(),   L::quiet_NaN(), T(-0.0),  T(0.0),
                         L::denorm_min(), -L::denorm_min(), L::min(),       L::max(), L::lowest()};
    std::uniform_int_distribution<std::size_t> pick(0, std::size(special) - 1);
    for (std::size_t i = 0; i < values.size(); i += 1 + rng() % 13)
      values[i] = special[pick(rng)];
  }
}

TEST_CASE_TEMPLATE_DEFINE(
    "every instruction set the CPU has gives the baseline's bits (NaN payloads aside)", T,
    isa_sweep) {
  using strata::detail::Isa;
  const std::vector<Isa> isas = isas_here();
  MESSAGE("widest instruction set here: " << strata::detail::name_of(isas.back()));
  std::mt19937_64 rng(11);
  std::vector<std::size_t> sizes = sizes_to_sweep();
  if constexpr (kHalf<T>) sizes.push_back(std::size_t{1} << 16);  // every bit pattern
  for (const std::size_t count : sizes) {
    for (const ReduceOp op : strata::kAllReduceOps) {
      CAPTURE(count);
      CAPTURE(op);
      std::vector<std::vector<T>> storage;
      for (int j = 0; j < 5; ++j) {
        storage.push_back(random_input<T>(count, op, rng));
        mix_in_special_values(storage.back(), rng);
      }
      for (const std::size_t n : {std::size_t{2}, std::size_t{3}, std::size_t{5}}) {
        // The output in place, or elsewhere at several offsets from a cache line: the kernels
        // align their blocks to it (the inputs are then placed differently).
        for (const std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
          const bool in_place = shift == 0;
          CAPTURE(n);
          CAPTURE(shift);
          std::vector<T> baseline;
          for (const Isa isa : isas) {
            CAPTURE(strata::detail::name_of(isa));
            std::vector<T> holder = in_place ? storage[0] : std::vector<T>(count + shift);
            const std::span<T> out = std::span<T>(holder).subspan(in_place ? 0 : shift, count);
            std::vector<const T*> inputs;
            for (std::size_t j = 0; j < n; ++j)
              inputs.push_back(storage[j].data());
            if (in_place) inputs[0] = out.data();
            strata::detail::reduce_n_on<T>(isa, out, inputs, op);
            if (isa == Isa::baseline) {
              baseline.assign(out.begin(), out.end());
            } else {
              CHECK(first_difference_but_nan_payload<T>(out, baseline) == "");
            }
          }
        }
      }
      std::vector<T> accumulated, self, divided;
      for (const Isa isa : isas) {
        CAPTURE(strata::detail::name_of(isa));
        std::vector<T> holder(count + 3), twice = storage[1], quotient = storage[2];
        const std::span<T> inout = std::span<T>(holder).subspan(3);  // off the cache line
        std::copy(storage[0].begin(), storage[0].end(), inout.begin());
        strata::detail::accumulate_on<T>(isa, inout, storage[1], op);
        strata::detail::accumulate_on<T>(isa, twice, twice, op);
        strata::detail::divide_on<T>(isa, quotient, 3);
        if (isa == Isa::baseline) {
          accumulated.assign(inout.begin(), inout.end());
          self = twice;
          divided = quotient;
        } else {
          CHECK(first_difference_but_nan_payload<T>(inout, accumulated) == "");
          CHECK(first_difference_but_nan_payload<T>(twice, self) == "");
          CHECK(first_difference_but_nan_payload<T>(quotient, divided) == "");
        }
      }
    }
  }
}
TEST_CASE_TEMPLATE_APPLY(isa_sweep, AllElementTypes);

TEST_CASE("integer sum and product wrap around in two's complement") {
  auto reduce2 = [](auto a, auto b, ReduceOp op) {
    using T = decltype(a);
    T out{};
    const T* const inputs[] = {&a, &b};
    strata::reduce_n<T>(std::span<T>(&out, 1), inputs, op);
    return out;
  };
  CHECK(reduce2(std::int8_t{127}, std::int8_t{1}, ReduceOp::sum) == std::int8_t{-128});
  CHECK(reduce2(std::int8_t{-128}, std::int8_t{-1}, ReduceOp::sum) == std::int8_t{127});
  CHECK(reduce2(std::int8_t{-128}, std::int8_t{-1}, ReduceOp::product) == std::int8_t{-128});
  CHECK(reduce2(std::uint8_t{200}, std::uint8_t{2}, ReduceOp::product) == std::uint8_t{144});
  CHECK(reduce2(std::uint8_t{255}, std::uint8_t{1}, ReduceOp::sum) == std::uint8_t{0});
  constexpr auto kMax32 = std::numeric_limits<std::int32_t>::max();
  constexpr auto kMin32 = std::numeric_limits<std::int32_t>::min();
  constexpr auto kMin64 = std::numeric_limits<std::int64_t>::min();
  CHECK(reduce2(kMax32, std::int32_t{1}, ReduceOp::sum) == kMin32);
  CHECK(reduce2(kMax32, kMax32, ReduceOp::product) == std::int32_t{1});
  CHECK(reduce2(kMin64, std::int64_t{-1}, ReduceOp::product) == kMin64);
  CHECK(reduce2(kMin64, kMin64, ReduceOp::sum) == std::int64_t{0});
  // Integer mean: the wrapped sum, divided with truncation toward zero.
  CHECK(reduce2(std::int8_t{-7}, std::int8_t{0}, ReduceOp::mean) == std::int8_t{-3});
  CHECK(reduce2(std::int8_t{100}, std::int8_t{100}, ReduceOp::mean) == std::int8_t{-28});
  CHECK(reduce2(std::uint8_t{255}, std::uint8_t{2}, ReduceOp::mean) == std::uint8_t{0});
  CHECK(reduce2(std::int32_t{7}, std::int32_t{0}, ReduceOp::mean) == std::int32_t{3});
}

TEST_CASE("integer divide truncates toward zero for any divisor") {
  std::vector<std::int8_t> small = {-128, -7, 7, 127, 0};
  strata::divide<std::int8_t>(small, 2);
  CHECK(small == std::vector<std::int8_t>{-64, -3, 3, 63, 0});
  small = {-128, -127, 127, 1};
  strata::divide<std::int8_t>(small, 128);  // larger than int8's max
  CHECK(small == std::vector<std::int8_t>{-1, 0, 0, 0});
  small = {-128, 127};
  strata::divide<std::int8_t>(small, 1000);
  CHECK(small == std::vector<std::int8_t>{0, 0});
  std::vector<std::uint8_t> bytes = {255, 7};
  strata::divide<std::uint8_t>(bytes, 256);
  CHECK(bytes == std::vector<std::uint8_t>{0, 0});
  constexpr auto kMin64 = std::numeric_limits<std::int64_t>::min();
  std::vector<std::int64_t> wide = {kMin64, kMin64 + 1, -9};
  strata::divide<std::int64_t>(wide, std::size_t{1} << 63);
  CHECK(wide == std::vector<std::int64_t>{-1, 0, 0});
  wide = {kMin64, -9};
  strata::divide<std::int64_t>(wide, std::numeric_limits<std::size_t>::max());
  CHECK(wide == std::vector<std::int64_t>{0, 0});
}

TEST_CASE("floating-point special values propagate through sum") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {inf, 1.0f, nan, inf, -0.0f};
  std::vector<float> b = {1.0f, nan, 2.0f, -inf, -0.0f};
  std::vector<float> out(a.size());
  const float* const inputs[] = {a.data(), b.data()};
  strata::reduce_n<float>(out, inputs, ReduceOp::sum);
  CHECK(out[0] == inf);
  CHECK(std::isnan(out[1]));
  CHECK(std::isnan(out[2]));
  CHECK(std::isnan(out[3]));
  CHECK((out[4] == 0.0f && std::signbit(out[4])));

  std::vector<float16> h = {float16(65504.0f), float16(inf), float16(-0.0f)};
  std::vector<float16> hout(h.size());
  const float16* const hinputs[] = {h.data(), h.data()};
  strata::reduce_n<float16>(hout, hinputs, ReduceOp::sum);
  CHECK(hout[0].bits() == 0x7c00);  // 131008 is beyond float16: infinity
  CHECK(hout[1].bits() == 0x7c00);
  CHECK(hout[2].bits() == 0x8000);
}

TEST_CASE("16-bit types accumulate in float and round once") {
  // Adding 1 to 2048 in float16 is a tie that rounds back to 2048, so per-step rounding would
  // give 2048; accumulating in float gives 2055, which rounds (ties to even) to 2056.
  std::vector<std::vector<float16>> storage = {{float16(2048.0f)}};
  for (int j = 0; j < 7; ++j)
    storage.push_back({float16(1.0f)});
  std::vector<const float16*> inputs;
  for (const auto& s : storage)
    inputs.push_back(s.data());
  std::vector<float16> out(1);
  strata::reduce_n<float16>(out, inputs, ReduceOp::sum);
  CHECK(static_cast<float>(out[0]) == 2056.0f);
  // accumulate() has nowhere to keep the float, so it rounds per call.
  std::vector<float16> acc = storage[0];
  for (std::size_t j = 1; j < storage.size(); ++j) {
    strata::accumulate<float16>(acc, storage[j], ReduceOp::sum);
  }
  CHECK(static_cast<float>(acc[0]) == 2048.0f);

  // bfloat16 has 8 significant bits: 256 + 1 rounds back to 256.
  std::vector<std::vector<bfloat16>> bstorage = {{bfloat16(256.0f)}};
  for (int j = 0; j < 4; ++j)
    bstorage.push_back({bfloat16(1.0f)});
  std::vector<const bfloat16*> binputs;
  for (const auto& s : bstorage)
    binputs.push_back(s.data());
  std::vector<bfloat16> bout(1);
  strata::reduce_n<bfloat16>(bout, binputs, ReduceOp::sum);
  CHECK(static_cast<float>(bout[0]) == 260.0f);
  // The mean divides in float before the single rounding: (256 + 4) / 5 = 52.
  strata::reduce_n<bfloat16>(bout, binputs, ReduceOp::mean);
  CHECK(static_cast<float>(bout[0]) == 52.0f);
}

// The 16-bit kernels' promise, element by element with the types' own conversions: widen every
// input, combine in float in the order given, round once (accumulate: once per call). Every bit
// pattern meets every op at every instruction set the CPU has, through a tail of a block.
float combine_in_float(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::product:
      return a * b;
    case ReduceOp::min:
      return b < a ? b : a;
    case ReduceOp::max:
      return a < b ? b : a;
    case ReduceOp::sum:
    case ReduceOp::mean:
      break;
  }
  return a + b;
}

TEST_CASE_TEMPLATE("16-bit kernels give the bits of combining in float and rounding once", T,
                   float16, bfloat16) {
  const std::size_t count = (std::size_t{1} << 16) - 7;  // ends inside a block
  std::vector<std::vector<T>> storage(3, std::vector<T>(count));
  for (std::size_t i = 0; i < count; ++i) {
    storage[0][i] = T::from_bits(static_cast<std::uint16_t>(i));
    storage[1][i] = T::from_bits(static_cast<std::uint16_t>(i * 40503u + 17));
    storage[2][i] = T::from_bits(static_cast<std::uint16_t>(i * 9973u + 4099));
  }
  for (const auto isa : isas_here()) {
    CAPTURE(strata::detail::name_of(isa));
    for (const ReduceOp op : strata::kAllReduceOps) {
      CAPTURE(op);
      for (const std::size_t k : {std::size_t{2}, std::size_t{3}}) {
        CAPTURE(k);
        std::vector<T> want(count);
        for (std::size_t i = 0; i < count; ++i) {
          float acc = static_cast<float>(storage[0][i]);
          for (std::size_t j = 1; j < k; ++j)
            acc = combine_in_float(op, acc, static_cast<float>(storage[j][i]));
          if (op == ReduceOp::mean) acc /= static_cast<float>(k);
          want[i] = T(acc);
        }
        std::vector<T> got(count);
        std::vector<const T*> inputs;
        for (std::size_t j = 0; j < k; ++j)
          inputs.push_back(storage[j].data());
        strata::detail::reduce_n_on<T>(isa, got, inputs, op);
        CHECK(first_difference_but_nan_payload<T>(got, want) == "");
      }
      std::vector<T> inout = storage[0];
      strata::detail::accumulate_on<T>(isa, inout, storage[1], op);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) {
        want[i] = T(combine_in_float(op, static_cast<float>(storage[0][i]),
                                     static_cast<float>(storage[1][i])));
      }
      CHECK(first_difference_but_nan_payload<T>(inout, want) == "");
    }
    std::vector<T> quotient = storage[2];
    strata::detail::divide_on<T>(isa, quotient, 3);
    std::vector<T> want(count);
    for (std::size_t i = 0; i < count; ++i)
      want[i] = T(static_cast<float>(storage[2][i]) / 3.0f);
    CHECK(first_difference_but_nan_payload<T>(quotient, want) == "");
  }
}

TEST_CASE("the branch-free 16-bit conversions are bit-identical to float16 and bfloat16") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float expected = float16::from_bits(bits);
    const float got = strata::detail::half_bits_to_float(bits);
    if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(expected)) {
      FAIL("half_bits_to_float(" << h << ")");
    }
  }
  // Every float takes ~20 s; a stride that is odd and prime reaches every exponent and many
  // rounding cases (the full 2^32 sweep was run when the conversions were written).
  std::uint64_t mismatches = 0;
  for (std::uint64_t x = 0; x <= 0xffffffffu; x += 251) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(x));
    mismatches += strata::detail::float_to_half_bits(f) != float16(f).bits();
    mismatches += strata::detail::float_to_bfloat16_bits(f) != bfloat16(f).bits();
  }
  CHECK(mismatches == 0);
}

#if STRATA_REDUCE_DISPATCH
// The block conversions at one instruction set against the portable ones: every float16, and
// floats at a prime stride, through every tail length (the last 1-15 elements take a padded
// vector). F16C quiets a signalling NaN as it widens; nothing else may differ.
template <strata::detail::Isa kIsa>
void check_half_blocks() {
  std::vector<float16> halves(std::size_t{1} << 16);
  for (std::size_t h = 0; h < halves.size(); ++h)
    halves[h] = float16::from_bits(static_cast<std::uint16_t>(h));
  std::vector<float> wide(halves.size());
  std::uint64_t mismatches = 0;
  for (std::size_t tail = 0; tail < 16; ++tail) {
    const std::size_t n = halves.size() - tail;
    strata::detail::widen_halves<kIsa>(wide.data(), halves.data(), n);
    for (std::size_t h = 0; h < n; ++h) {
      auto want =
          std::bit_cast<std::uint32_t>(strata::detail::half_bits_to_float(halves[h].bits()));
      if ((want & 0x7fffffffu) > 0x7f800000u) want |= 0x00400000u;  // quieted
      mismatches += std::bit_cast<std::uint32_t>(wide[h]) != want;
    }
  }
  CHECK(mismatches == 0);

  std::vector<float> floats;
  for (std::uint64_t x = 0; x <= 0xffffffffu; x += 251)
    floats.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(x)));
  std::vector<float16> narrow(floats.size());
  strata::detail::narrow_halves<kIsa>(narrow.data(), floats.data(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i)
    mismatches += narrow[i].bits() != strata::detail::float_to_half_bits(floats[i]);
  // Each tail length on short runs spread over the sweep (all of it per length is slow under
  // the sanitizers).
  for (std::size_t tail = 1; tail < 16; ++tail) {
    const std::size_t n = 32 + tail;
    for (std::size_t start = tail; start + n <= floats.size(); start += 4099) {
      strata::detail::narrow_halves<kIsa>(narrow.data(), floats.data() + start, n);
      for (std::size_t i = 0; i < n; ++i)
        mismatches += narrow[i].bits() != strata::detail::float_to_half_bits(floats[start + i]);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("F16C block conversions give the portable conversions' bits") {
  using strata::detail::Isa;
  if (strata::detail::best_isa() >= Isa::avx2) check_half_blocks<Isa::avx2>();
  if (strata::detail::best_isa() >= Isa::avx512) check_half_blocks<Isa::avx512>();
  if (strata::detail::best_isa() == Isa::baseline) MESSAGE("no AVX2 and F16C here: not run");
}
#endif

TEST_CASE("the kernel table of every element type gives the typed result") {
  std::mt19937_64 rng(3);
  constexpr std::size_t kCount = 1500;
  auto run = [&]<class T>(std::type_identity<T>) {
    CAPTURE(strata::data_type_of<T>);
    for (const std::size_t n : {std::size_t{3}, std::size_t{20}}) {  // 20: pointers on the heap
      CAPTURE(n);
      std::vector<std::vector<T>> storage;
      for (std::size_t j = 0; j < n; ++j)
        storage.push_back(random_input<T>(kCount, ReduceOp::sum, rng));
      std::vector<const T*> typed;
      std::vector<const void*> erased;
      for (const auto& s : storage) {
        typed.push_back(s.data());
        erased.push_back(s.data());
      }
      for (const ReduceOp op : strata::kAllReduceOps) {
        CAPTURE(op);
        std::vector<T> out(kCount);
        strata::reduce_kernels_of<T>.reduce_n(out.data(), erased.data(), erased.size(), kCount, op);
        CHECK(first_bit_difference<T>(
                  out, run_reduce_n(typed, kCount, op, Placement::out_of_place)) == "");
      }
    }
  };
  for (std::uint8_t t = 0; t <= static_cast<std::uint8_t>(strata::DataType::float64); ++t) {
    strata::visit_data_type(static_cast<strata::DataType>(t), run);
  }
}

// Checks that `call` throws UsageError for `operation`, with rank -1 and the operation in the
// message ("strata: OPERATION: ...").
template <class F>
void check_usage_error(F&& call, const std::string& operation) {
  CAPTURE(operation);
  bool thrown = false;
  try {
    call();
  } catch (const strata::UsageError& e) {
    thrown = true;
    CHECK(e.rank() == -1);
    CHECK(e.operation() == operation);
    CHECK(std::string(e.what()).starts_with("strata: " + operation + ": "));
    CHECK(std::string(e.what()).find("; ") != std::string::npos);  // says what to do
  }
  CHECK(thrown);
}

TEST_CASE("precondition violations throw UsageError naming the operation") {
  std::vector<float> a(8, 1.0f), b(8, 2.0f), out(8);
  const float* const none[] = {nullptr};

  check_usage_error(
      [&] { strata::reduce_n<float>(out, std::span<const float* const>(), ReduceOp::sum); },
      "reduce_n");
  check_usage_error(
      [&] { strata::reduce_n<float>({}, std::span<const float* const>(), ReduceOp::sum); },
      "reduce_n");
  check_usage_error([&] { strata::reduce_n<float>(out, none, ReduceOp::sum); }, "reduce_n");
  const float* const inputs[] = {a.data(), b.data()};
  check_usage_error([&] { strata::reduce_n<float>(out, inputs, static_cast<ReduceOp>(17)); },
                    "reduce_n");
  // Partial overlap of out with an input (equal pointers are fine, shifted ones are not).
  check_usage_error(
      [&] { strata::reduce_n<float>(std::span<float>(a).subspan(1, 4), inputs, ReduceOp::sum); },
      "reduce_n");

  check_usage_error(
      [&] { strata::accumulate<float>(a, std::span<const float>(b).first(7), ReduceOp::sum); },
      "accumulate");
  check_usage_error([&] { strata::accumulate<float>(a, b, static_cast<ReduceOp>(5)); },
                    "accumulate");
  check_usage_error(
      [&] {
        strata::accumulate<float>(std::span<float>(a).first(4),
                                  std::span<const float>(a).subspan(2, 4), ReduceOp::sum);
      },
      "accumulate");

  check_usage_error([&] { strata::divide<float>(a, 0); }, "divide");
  check_usage_error([&] { strata::divide<std::int32_t>({}, 0); }, "divide");

  const void* const erased[] = {a.data(), b.data()};
  const strata::ReduceKernels& kernels = strata::reduce_kernels_of<float>;
  check_usage_error([&] { kernels.reduce_n(out.data(), erased, 0, 8, ReduceOp::sum); }, "reduce_n");
  check_usage_error([&] { kernels.reduce_n(out.data(), nullptr, 2, 8, ReduceOp::sum); },
                    "reduce_n");
  check_usage_error([&] { kernels.reduce_n(nullptr, erased, 2, 8, ReduceOp::sum); }, "reduce_n");
  check_usage_error([&] { kernels.reduce_n(out.data(), erased, 2, 8, static_cast<ReduceOp>(9)); },
                    "reduce_n");
  check_usage_error([&] { kernels.divide(out.data(), 8, 0); }, "divide");

  // A call whose kernel table is missing or of another type is refused, not reinterpreted.
  strata::CollectiveCall call{strata::Collective::all_reduce, strata::DataType::float32, 8};
  check_usage_error([&] { (void)strata::kernels_of(call); }, "all_reduce");
  call.kernels = &strata::reduce_kernels_of<double>;
  check_usage_error([&] { (void)strata::kernels_of(call); }, "all_reduce");
  call.kernels = &strata::reduce_kernels_of<float>;
  CHECK(&strata::kernels_of(call) == &kernels);

  // An empty output is a no-op, whatever the input pointers.
  CHECK_NOTHROW(strata::reduce_n<float>({}, none, ReduceOp::sum));
  CHECK_NOTHROW(
      strata::reduce_kernels_of<std::int8_t>.reduce_n(nullptr, erased, 2, 0, ReduceOp::max));
}

}  // namespace
