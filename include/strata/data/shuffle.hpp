// strata/data/shuffle.hpp — portable, deterministic shuffling: the same permutation on every
// worker, every standard library and every platform.
//
// `std::shuffle` and `std::uniform_int_distribution` are not usable here: the standard leaves
// their algorithms to the implementation, so libstdc++, libc++ and MSVC give different
// permutations for the same seed, and workers built differently would train on different
// global batches. Everything below is specified exactly, down to the bit:
//
// - `SplitMix64` (Steele, Lea & Flood 2014; Vigna's splitmix64.c): expands a 64-bit seed.
// - `Xoshiro256StarStar` (Blackman & Vigna 2018; xoshiro256starstar.c): the generator, its
//   256-bit state filled with the first four SplitMix64 outputs, as its authors recommend.
// - `uniform_below` (Lemire 2019, "Fast Random Integer Generation in an Interval"): unbiased
//   integers in [0, bound) by multiply-and-reject, nearly without divisions.
// - `fisher_yates_shuffle` (Durstenfeld's in-place Fisher–Yates, from the top index down).
// - `epoch_generator` / `epoch_permutation`: how a (seed, epoch) pair picks a permutation.
//
// The unit tests pin published reference outputs of SplitMix64 and xoshiro256** and a golden
// permutation, so a change to any step fails loudly instead of silently desynchronizing jobs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::data {

/// SplitMix64, exactly as Vigna's reference `splitmix64.c`: the state advances by the golden
/// ratio constant 0x9e3779b97f4a7c15 and each output is that state through a bijective mixer.
/// Every seed is fine (including 0). Period 2^64. Used here to seed `Xoshiro256StarStar`.
///
/// Reference outputs: seed 0 gives 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, ...; seed 1234567
/// gives 6457827717110365317, 3203168211198807973, ...
class SplitMix64 {
 public:
  using result_type = std::uint64_t;

  constexpr explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}

  constexpr std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
  }

  // UniformRandomBitGenerator, so that it also works with <random> (where portability is not
  // needed).
  constexpr std::uint64_t operator()() noexcept { return next(); }
  static constexpr std::uint64_t min() noexcept { return 0; }
  static constexpr std::uint64_t max() noexcept {
    return std::numeric_limits<std::uint64_t>::max();
  }

 private:
  std::uint64_t state_;
};

/// xoshiro256** 1.0, exactly as the reference `xoshiro256starstar.c`: 256 bits of state,
/// period 2^256 - 1, output `rotl(s[1] * 5, 7) * 9`.
///
/// `Xoshiro256StarStar(seed)` fills the state with the first four outputs of
/// `SplitMix64(seed)` (never all zero). `from_state` sets the state directly, for testing
/// against published vectors: from {1, 2, 3, 4} the outputs are 11520, 0, 1509978240,
/// 1215971899390074240, ...
class Xoshiro256StarStar {
 public:
  using result_type = std::uint64_t;

  constexpr explicit Xoshiro256StarStar(std::uint64_t seed) noexcept : state_{} {
    SplitMix64 seeder(seed);
    for (std::uint64_t& word : state_)
      word = seeder.next();
  }

  /// A generator with exactly this state; the state must not be all zero.
  static constexpr Xoshiro256StarStar from_state(
      const std::array<std::uint64_t, 4>& state) noexcept {
    Xoshiro256StarStar generator(0);
    generator.state_ = state;
    return generator;
  }

  constexpr const std::array<std::uint64_t, 4>& state() const noexcept { return state_; }

  constexpr std::uint64_t next() noexcept {
    std::array<std::uint64_t, 4>& s = state_;
    const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }

  constexpr std::uint64_t operator()() noexcept { return next(); }
  static constexpr std::uint64_t min() noexcept { return 0; }
  static constexpr std::uint64_t max() noexcept {
    return std::numeric_limits<std::uint64_t>::max();
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }

  std::array<std::uint64_t, 4> state_;
};

namespace detail {

struct U128 {
  std::uint64_t high;
  std::uint64_t low;
};

// The full 128-bit product a * b from 32-bit halves: portable (no unsigned __int128, which
// MSVC lacks and -Wpedantic rejects), and bit-identical to it.
constexpr U128 multiply_64x64(std::uint64_t a, std::uint64_t b) noexcept {
  constexpr std::uint64_t kLow32 = 0xffffffffu;
  const std::uint64_t a0 = a & kLow32, a1 = a >> 32;
  const std::uint64_t b0 = b & kLow32, b1 = b >> 32;
  const std::uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  // Sum of three values below 2^32 each: cannot overflow.
  const std::uint64_t middle = (p00 >> 32) + (p01 & kLow32) + (p10 & kLow32);
  return U128{p11 + (p01 >> 32) + (p10 >> 32) + (middle >> 32), (middle << 32) | (p00 & kLow32)};
}

}  // namespace detail

/// A uniformly distributed integer in [0, bound), by Lemire's nearly divisionless method:
///
///     x = rng.next(); m = x * bound (128 bits); l = low 64 bits of m
///     if l < bound:
///         t = (2^64 - bound) mod bound        // = 2^64 mod bound
///         while l < t: x = rng.next(); m = x * bound; l = low 64 bits of m
///     return high 64 bits of m
///
/// Exactly unbiased; draws one value from `rng` except with probability below
/// bound / 2^64, and divides only then.
///
/// @throws UsageError ("data::uniform_below") if `bound == 0`.
inline std::uint64_t uniform_below(Xoshiro256StarStar& rng, std::uint64_t bound) {
  if (bound == 0)
    throw UsageError(-1, "data::uniform_below", "bound is 0, so [0, bound) is empty",
                     "pass a bound of at least 1");
  detail::U128 m = detail::multiply_64x64(rng.next(), bound);
  if (m.low < bound) {
    const std::uint64_t threshold = (0 - bound) % bound;
    while (m.low < threshold)
      m = detail::multiply_64x64(rng.next(), bound);
  }
  return m.high;
}

/// Shuffles `values` in place with Durstenfeld's Fisher–Yates, exactly:
///
///     for i = n - 1 down to 1:  j = uniform_below(rng, i + 1); swap(values[i], values[j])
///
/// Every one of the n! orders is equally likely given a uniform generator (up to what the
/// generator's seed can reach: a 64-bit seed selects at most 2^64 permutations). Draws
/// n - 1 values (plus rare rejections) from `rng`. Cost: O(n).
template <class T>
void fisher_yates_shuffle(std::span<T> values, Xoshiro256StarStar& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(rng, i));
    using std::swap;
    swap(values[i - 1], values[j]);
  }
}

/// The generator that shuffles epoch `epoch` of a run seeded with `seed`:
///
///     key = SplitMix64(seed).next()           // a bijection of seed
///     return Xoshiro256StarStar(key ^ epoch)  // state: 4 outputs of SplitMix64(key ^ epoch)
///
/// Because `key` is a bijective scramble of `seed`, different epochs of one seed, and one
/// epoch of different seeds, always get different generator seeds; seed 1 epoch 0 and seed 0
/// epoch 1 do not collide as they would with a plain `seed ^ epoch` or `seed + epoch`.
constexpr Xoshiro256StarStar epoch_generator(std::uint64_t seed, std::uint64_t epoch) noexcept {
  SplitMix64 scramble(seed);
  return Xoshiro256StarStar(scramble.next() ^ epoch);
}

/// The order in which epoch `epoch` visits examples `0 .. n-1`: `fisher_yates_shuffle` of
/// `0, 1, ..., n-1` driven by `epoch_generator(seed, epoch)`.
///
/// Deterministic and portable: the same (n, seed, epoch) gives the same permutation on every
/// worker, compiler, standard library and platform; different epochs (and seeds) give
/// different, independent-looking permutations. Like tf.data's
/// `shuffle(buffer_size >= n, seed, reshuffle_each_iteration=True)` in effect (a uniform
/// shuffle per epoch), though not the same permutations as TensorFlow.
///
/// Cost: O(n) time, n `std::size_t` of memory.
///
/// Example:
///
///     for (std::size_t i : strata::data::epoch_permutation(n, /*seed=*/42, epoch)) visit(i);
inline std::vector<std::size_t> epoch_permutation(std::size_t n, std::uint64_t seed,
                                                  std::uint64_t epoch) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Xoshiro256StarStar rng = epoch_generator(seed, epoch);
  fisher_yates_shuffle(std::span<std::size_t>(order), rng);
  return order;
}

}  // namespace strata::data
