// Tests for algorithms/detail/messages.hpp: the wavefront order of pipelined rings.
#include <strata/algorithms/detail/messages.hpp>

#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

using strata::algorithms::detail::Wavefront;

namespace {

std::vector<std::pair<std::size_t, std::size_t>> sequence(const Wavefront& order) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < order.size(); ++i)
    out.emplace_back(order.step(i), order.segment(i));
  return out;
}

}  // namespace

TEST_CASE("Wavefront puts segment k of step t right after segment k + 4 of step t-1") {
  static_assert(Wavefront::kLag == 4);
  using P = std::pair<std::size_t, std::size_t>;
  // Written out by hand: step 1 starts once step 0 is kLag segments ahead, and on a front
  // the earlier step goes first.
  const std::vector<P> two_steps = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 0},
                                    {0, 5}, {1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}};
  CHECK(sequence(Wavefront(2, 6)) == two_steps);
  const std::vector<P> three_steps = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 0},
                                      {0, 5}, {1, 1}, {1, 2}, {1, 3}, {1, 4}, {2, 0},
                                      {1, 5}, {2, 1}, {2, 2}, {2, 3}, {2, 4}, {2, 5}};
  CHECK(sequence(Wavefront(3, 6)) == three_steps);
}

TEST_CASE("Wavefront is step by step when a step has no more than kLag segments") {
  for (const std::size_t segments : {std::size_t{1}, std::size_t{3}, Wavefront::kLag}) {
    const Wavefront order(3, segments);
    for (std::size_t i = 0; i < order.size(); ++i) {
      CHECK(order.step(i) == i / segments);
      CHECK(order.segment(i) == i % segments);
    }
  }
}

TEST_CASE("Wavefront orders every message once and forwards only earlier ones") {
  for (const std::size_t steps : {1, 2, 3, 6, 14})
    for (const std::size_t segments : {1, 2, 4, 5, 9, 64, 257}) {
      CAPTURE(steps);
      CAPTURE(segments);
      const Wavefront order(steps, segments);
      REQUIRE(order.size() == steps * segments);
      std::set<std::pair<std::size_t, std::size_t>> seen;
      for (std::size_t i = 0; i < order.size(); ++i) {
        const std::size_t t = order.step(i);
        const std::size_t k = order.segment(i);
        REQUIRE(t < steps);
        REQUIRE(k < segments);
        CHECK(seen.emplace(t, k).second);
        CHECK(order.position(t, k) == i);
        // Within a step segments keep their order: a receive slot is reused in order.
        if (k > 0) CHECK(order.position(t, k - 1) < i);
        if (t == 0) {
          CHECK(order.forwards(i) == -1);
        } else {
          const auto forwarded = order.forwards(i);
          REQUIRE(forwarded >= 0);
          CHECK(static_cast<std::size_t>(forwarded) < i);
          CHECK(order.step(static_cast<std::size_t>(forwarded)) == t - 1);
          CHECK(order.segment(static_cast<std::size_t>(forwarded)) == k);
        }
      }
      CHECK(seen.size() == steps * segments);
    }
}
