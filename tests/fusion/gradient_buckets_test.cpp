// strata/fusion/gradient_buckets.hpp: fused steps give the same bits as one all-reduce per
// gradient, whatever order gradients become ready in on each rank and whatever buckets the caps
// make; gradients that live in the buckets; several steps; a rank with a different list gets
// MismatchError naming the gradient, and so does every other; a peer that aborts or stops in
// the middle of a bucketed step fails every rank's step; misuse is a UsageError; a bucket that
// completes during the step is copied out by a ready that starts a later one; hand-made
// GradientRefs are refused; a communicator that takes only typed calls works.
#include <strata/fusion/gradient_buckets.hpp>

#include <strata/communicator/local.hpp>
#include <strata/communicator/tcp.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "communicator_doubles.hpp"
#include "exceptions.hpp"
#include "rank_team.hpp"

namespace {

using namespace std::chrono_literals;
using strata::bfloat16;
using strata::DataType;
using strata::ReduceOp;
using strata::communicator::CommunicatorOptions;
using strata::communicator::LocalCommunicator;
using strata::communicator::TcpCommunicator;
using strata::fusion::BucketOptions;
using strata::fusion::GradientBuckets;
using strata::fusion::GradientRef;
using strata::fusion::GradientSpec;
using strata::testing::holds;
using strata::testing::message_of;
using Local = LocalCommunicator<>;

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// One rank's gradients: float, double, bfloat16 and int32 buffers of the listed sizes, filled
// with values that depend on the rank, the gradient, the element and the step.
struct Gradients {
  std::vector<GradientSpec> specs;
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<double>> f64;
  std::vector<std::vector<bfloat16>> bf16;
  std::vector<std::vector<std::int32_t>> i32;

  explicit Gradients(std::vector<GradientSpec> list) : specs(std::move(list)) {
    for (const GradientSpec& spec : specs) {
      f32.emplace_back(spec.type == DataType::float32 ? spec.count : 0);
      f64.emplace_back(spec.type == DataType::float64 ? spec.count : 0);
      bf16.emplace_back(spec.type == DataType::bfloat16 ? spec.count : 0);
      i32.emplace_back(spec.type == DataType::int32 ? spec.count : 0);
    }
  }

  void fill(int rank, int step) {
    for (std::size_t g = 0; g < specs.size(); ++g) {
      for (std::size_t k = 0; k < specs[g].count; ++k) {
        const double x = 0.37 * static_cast<double>(rank + 1) + 0.011 * static_cast<double>(g) -
                         0.0007 * static_cast<double>(k % 97) + 0.13 * step;
        f32[g].empty() ? void() : void(f32[g][k] = static_cast<float>(x / 3.0));
        f64[g].empty() ? void() : void(f64[g][k] = x / 7.0);
        bf16[g].empty() ? void() : void(bf16[g][k] = bfloat16(static_cast<float>(x)));
        i32[g].empty() ? void()
                       : void(i32[g][k] = static_cast<std::int32_t>(k) * (rank + 1) + step);
      }
    }
  }

  // f(values) with gradient g's vector, of its type.
  template <class F>
  void visit(std::size_t g, F&& f) {
    switch (specs[g].type) {
      case DataType::float32:
        return f(f32[g]);
      case DataType::float64:
        return f(f64[g]);
      case DataType::bfloat16:
        return f(bf16[g]);
      default:
        return f(i32[g]);
    }
  }

  std::vector<GradientRef> refs() {
    std::vector<GradientRef> out;
    for (std::size_t g = 0; g < specs.size(); ++g)
      visit(g, [&](auto& values) { out.push_back(strata::fusion::gradient(std::span(values))); });
    return out;
  }

  // One all-reduce per gradient: the unfused reference.
  template <class Comm>
  void all_reduce_each(Comm& comm) {
    for (std::size_t g = 0; g < specs.size(); ++g)
      visit(g, [&](auto& values) { comm.all_reduce(std::span(values), ReduceOp::sum); });
  }

  // Gradient g written into its bucket buffer, as a trainer computing it there does.
  template <class Buckets>
  void write_into(Buckets& buckets, std::size_t g) {
    visit(g, [&](auto& values) {
      using T = typename std::remove_reference_t<decltype(values)>::value_type;
      std::copy(values.begin(), values.end(), buckets.template buffer<T>(g).begin());
    });
  }

  // Gradient g's reduced values read back from its bucket buffer.
  template <class Buckets>
  void read_from(Buckets& buckets, std::size_t g) {
    visit(g, [&](auto& values) {
      using T = typename std::remove_reference_t<decltype(values)>::value_type;
      const auto from = buckets.template buffer<T>(g);
      std::copy(from.begin(), from.end(), values.begin());
    });
  }

  bool same_bits(const Gradients& other) const {
    const auto bytes_equal = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
    };
    for (std::size_t g = 0; g < specs.size(); ++g) {
      if (!bytes_equal(f32[g], other.f32[g]) || !bytes_equal(f64[g], other.f64[g]) ||
          !bytes_equal(bf16[g], other.bf16[g]) || !bytes_equal(i32[g], other.i32[g])) {
        return false;
      }
    }
    return true;
  }
};

std::vector<GradientSpec> random_list(std::mt19937_64& random) {
  const DataType types[] = {DataType::float32, DataType::float64, DataType::bfloat16,
                            DataType::int32};
  const std::size_t sizes[] = {0, 1, 2, 3, 7, 31, 97, 1021, 4099, 65537};
  std::vector<GradientSpec> list(1 + random() % 24);
  for (auto& spec : list) {
    spec.type = types[random() % 4];
    spec.count = sizes[random() % 10];
  }
  return list;
}

// A fused step on every rank (readiness in an order of each rank's own) against one all-reduce
// per gradient on a second group of the same kind: the same bits, for several steps.
template <class Comm>
void check_fused_equals_unfused(strata::testing::RankTeam<Comm>& fused_team,
                                strata::testing::RankTeam<Comm>& unfused_team,
                                const std::vector<GradientSpec>& list, BucketOptions options,
                                std::uint64_t seed) {
  const int n = fused_team.size();
  std::vector<Gradients> fused(static_cast<std::size_t>(n), Gradients(list));
  std::vector<Gradients> unfused(static_cast<std::size_t>(n), Gradients(list));
  std::vector<std::unique_ptr<GradientBuckets<Comm>>> buckets(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    buckets[static_cast<std::size_t>(r)] = std::make_unique<GradientBuckets<Comm>>(
        fused_team[r], fused[static_cast<std::size_t>(r)].refs(), options);
  }
  for (int step = 0; step < 3; ++step) {
    fused_team.run_or_throw([&](int rank) {
      auto& mine = fused[static_cast<std::size_t>(rank)];
      mine.fill(rank, step);
      std::vector<std::size_t> order(list.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::mt19937_64 shuffle(seed + static_cast<std::uint64_t>(rank * 1000 + step));
      std::shuffle(order.begin(), order.end(), shuffle);
      for (const std::size_t g : order)
        buckets[static_cast<std::size_t>(rank)]->ready(g);
      buckets[static_cast<std::size_t>(rank)]->wait();
    });
    unfused_team.run_or_throw([&](int rank) {
      auto& mine = unfused[static_cast<std::size_t>(rank)];
      mine.fill(rank, step);
      mine.all_reduce_each(unfused_team[rank]);
    });
    for (int r = 0; r < n; ++r) {
      REQUIRE(fused[static_cast<std::size_t>(r)].same_bits(unfused[static_cast<std::size_t>(r)]));
    }
  }
  // Integers against sums computed here: sum over ranks of k·(r+1) + step (step 2).
  for (std::size_t g = 0; g < list.size(); ++g) {
    for (std::size_t k = 0; k < fused[0].i32[g].size(); ++k) {
      REQUIRE(fused[0].i32[g][k] == static_cast<std::int32_t>(k) * n * (n + 1) / 2 + 2 * n);
    }
  }
}

TEST_CASE("fused steps give the bits of one all-reduce per gradient (in process)") {
  std::mt19937_64 random(7);
  for (const int n : {1, 2, 3, 4}) {
    strata::testing::RankTeam<Local> fused(n);
    strata::testing::RankTeam<Local> unfused(n);
    for (int trial = 0; trial < 12; ++trial) {
      const auto list = random_list(random);
      const BucketOptions options{.bucket_bytes = 1 + random() % 20000,
                                  .first_bucket_bytes = 1 + random() % 5000};
      CAPTURE(n);
      CAPTURE(trial);
      check_fused_equals_unfused(fused, unfused, list, options, random());
    }
  }
}

TEST_CASE("fused steps give the bits of one all-reduce per gradient (TCP, 2 ranks)") {
  std::mt19937_64 random(11);
  strata::testing::RankTeam<TcpCommunicator> fused(2);
  strata::testing::RankTeam<TcpCommunicator> unfused(2);
  for (int trial = 0; trial < 6; ++trial) {
    const auto list = random_list(random);
    const BucketOptions options{.bucket_bytes = 1 + random() % 40000,
                                .first_bucket_bytes = 1 + random() % 8000};
    CAPTURE(trial);
    check_fused_equals_unfused(fused, unfused, list, options, random());
  }
}

// Ranks of one host (threads, each with its own mapping) with an arena of `arena` bytes each.
strata::testing::RankTeam<TcpCommunicator> team_with_arena(int size, std::size_t arena) {
  return strata::testing::RankTeam<TcpCommunicator>(size, {},
                                                    [arena](int n, const CommunicatorOptions& o) {
                                                      strata::communicator::TcpOptions tcp;
                                                      tcp.shared_buffer_bytes = arena;
                                                      return TcpCommunicator::create(n, o, tcp);
                                                    });
}

// TCP ranks of one host whose buckets go into their arenas (TcpOptions::shared_buffer_bytes):
// the buckets take the arena, and the steps give the bits of the staged path and of one
// all-reduce per gradient, with the gradients in the trainer's buffers or in the buckets. An
// arena too small for the buckets leaves them in ordinary memory, with the same results.
TEST_CASE("buckets in the arenas of co-located TCP ranks (shared_buffer_bytes)") {
  const std::vector<GradientSpec> list{{DataType::float32, 70001}, {DataType::float64, 4099},
                                       {DataType::float32, 0},     {DataType::int32, 65537},
                                       {DataType::float32, 1},     {DataType::float32, 300007},
                                       {DataType::float32, 5003},  {DataType::float64, 17},
                                       {DataType::int32, 12},      {DataType::float32, 3}};
  const BucketOptions options{.bucket_bytes = 1 << 20, .first_bucket_bytes = 1 << 16};
  auto arenas = team_with_arena(3, std::size_t{4} << 20);
  auto small_arenas = team_with_arena(3, std::size_t{16} << 10);
  strata::testing::RankTeam<TcpCommunicator> staged(3);
  constexpr int n = 3;
  for (const bool in_buckets : {false, true}) {
    CAPTURE(in_buckets);
    std::vector<Gradients> grads(n, Gradients(list));
    std::vector<Gradients> small(n, Gradients(list));
    std::vector<Gradients> unfused(n, Gradients(list));
    std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> in_arena(n);
    std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> beside(n);
    for (int r = 0; r < n; ++r) {
      const auto at = static_cast<std::size_t>(r);
      in_arena[at] =
          in_buckets ? std::make_unique<GradientBuckets<TcpCommunicator>>(arenas[r], list, options)
                     : std::make_unique<GradientBuckets<TcpCommunicator>>(
                           arenas[r], grads[at].refs(), options);
      beside[at] = std::make_unique<GradientBuckets<TcpCommunicator>>(small_arenas[r],
                                                                      small[at].refs(), options);
      // Every bucket with storage of its own lies in the arena: all of them when the gradients
      // live in the buckets, else those of more than one gradient.
      std::size_t expected = 0;
      for (const auto& bucket : in_arena[at]->plan().buckets())
        expected += in_buckets || bucket.slots.size() > 1 ? bucket.bytes() : 0;
      CHECK(expected > 0);
      CHECK(in_arena[at]->shared_bytes() == expected);
      CHECK(beside[at]->shared_bytes() < expected);
    }
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      arenas.run_or_throw([&](int rank) {
        auto& mine = grads[static_cast<std::size_t>(rank)];
        auto& buckets = *in_arena[static_cast<std::size_t>(rank)];
        mine.fill(rank, step);
        for (std::size_t g = list.size(); g-- > 0;) {
          if (in_buckets) mine.write_into(buckets, g);
          buckets.ready(g);
        }
        buckets.wait();
        if (!in_buckets) return;
        for (std::size_t g = 0; g < list.size(); ++g)
          mine.read_from(buckets, g);
      });
      small_arenas.run_or_throw([&](int rank) {
        auto& mine = small[static_cast<std::size_t>(rank)];
        mine.fill(rank, step);
        for (std::size_t g = 0; g < list.size(); ++g)
          beside[static_cast<std::size_t>(rank)]->ready(g);
        beside[static_cast<std::size_t>(rank)]->wait();
      });
      staged.run_or_throw([&](int rank) {
        auto& mine = unfused[static_cast<std::size_t>(rank)];
        mine.fill(rank, step);
        mine.all_reduce_each(staged[rank]);
      });
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CHECK(grads[static_cast<std::size_t>(r)].same_bits(unfused[static_cast<std::size_t>(r)]));
        CHECK(small[static_cast<std::size_t>(r)].same_bits(unfused[static_cast<std::size_t>(r)]));
      }
      // Integers against sums computed here: sum over ranks of k·(r+1) + step.
      for (std::size_t k = 0; k < list[3].count; ++k)
        REQUIRE(grads[0].i32[3][k] == static_cast<std::int32_t>(k) * n * (n + 1) / 2 + step * n);
    }
  }
}

// A compressed bucket's wire bytes go to the arena, its float32 values do not: the arena's
// all-reduce of the 16-bit values gives the bits of the staged one.
TEST_CASE("compressed buckets in the arenas: their wire bytes, the staged path's bits") {
  const std::vector<GradientSpec> list{{DataType::float32, 70001},
                                       {DataType::float64, 4099},
                                       {DataType::float32, 5003},
                                       {DataType::float32, 3}};
  const BucketOptions options{.bucket_bytes = 1 << 20,
                              .first_bucket_bytes = 1 << 16,
                              .compression = strata::fusion::Compression::bfloat16};
  constexpr int n = 2;
  auto arenas = team_with_arena(n, std::size_t{2} << 20);
  strata::testing::RankTeam<TcpCommunicator> staged(n);
  std::vector<Gradients> in_arena(n, Gradients(list));
  std::vector<Gradients> beside(n, Gradients(list));
  std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> a(n);
  std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>> b(n);
  for (int r = 0; r < n; ++r) {
    const auto at = static_cast<std::size_t>(r);
    a[at] =
        std::make_unique<GradientBuckets<TcpCommunicator>>(arenas[r], in_arena[at].refs(), options);
    b[at] =
        std::make_unique<GradientBuckets<TcpCommunicator>>(staged[r], beside[at].refs(), options);
    std::size_t expected = 0;
    for (const auto& bucket : a[at]->plan().buckets())
      expected += bucket.type == DataType::float32 ? bucket.count * 2
                  : bucket.slots.size() > 1        ? bucket.bytes()
                                                   : 0;
    CHECK(expected > 0);
    CHECK(a[at]->shared_bytes() == expected);
    CHECK(b[at]->shared_bytes() == 0);
  }
  for (int step = 0; step < 2; ++step) {
    const auto run = [&](strata::testing::RankTeam<TcpCommunicator>& team,
                         std::vector<Gradients>& grads,
                         std::vector<std::unique_ptr<GradientBuckets<TcpCommunicator>>>& buckets) {
      team.run_or_throw([&](int rank) {
        grads[static_cast<std::size_t>(rank)].fill(rank, step);
        for (std::size_t g = 0; g < list.size(); ++g)
          buckets[static_cast<std::size_t>(rank)]->ready(g);
        buckets[static_cast<std::size_t>(rank)]->wait();
      });
    };
    run(arenas, in_arena, a);
    run(staged, beside, b);
    for (int r = 0; r < n; ++r)
      CHECK(in_arena[static_cast<std::size_t>(r)].same_bits(beside[static_cast<std::size_t>(r)]));
  }
}

TEST_CASE("gradients that live in the buckets") {
  strata::testing::RankTeam<Local> team(3);
  const std::vector<GradientSpec> list{{DataType::float32, 5},
                                       {DataType::float64, 3},
                                       {DataType::float32, 0},
                                       {DataType::float32, 9}};
  std::vector<std::unique_ptr<GradientBuckets<Local>>> buckets(3);
  for (int r = 0; r < 3; ++r) {
    buckets[static_cast<std::size_t>(r)] = std::make_unique<GradientBuckets<Local>>(
        team[r], list, BucketOptions{.bucket_bytes = 24, .first_bucket_bytes = 8});
  }
  for (int step = 1; step <= 2; ++step) {
    team.run_or_throw([&](int rank) {
      auto& mine = *buckets[static_cast<std::size_t>(rank)];
      for (const std::size_t g : {3u, 1u, 0u, 2u}) {
        if (list[g].type == DataType::float64) {
          auto values = mine.buffer<double>(g);
          for (std::size_t k = 0; k < values.size(); ++k)
            values[k] = rank * 10.0 + k + step;
        } else {
          auto values = mine.buffer<float>(g);
          for (std::size_t k = 0; k < values.size(); ++k)
            values[k] = float(rank + k * step);
        }
        mine.ready(g);
      }
      mine.wait();
    });
    for (int r = 0; r < 3; ++r) {
      auto& mine = *buckets[static_cast<std::size_t>(r)];
      const auto w = mine.buffer<float>(3);
      for (std::size_t k = 0; k < w.size(); ++k)
        CHECK(w[k] == float(0 + 1 + 2 + 3 * k * step));
      const auto d = mine.buffer<double>(1);
      for (std::size_t k = 0; k < d.size(); ++k)
        CHECK(d[k] == 30.0 + 3.0 * (k + step));
    }
  }
  CHECK_THROWS_AS(buckets[0]->buffer<double>(0), strata::UsageError);
  CHECK_THROWS_AS(buckets[0]->buffer<float>(4), strata::UsageError);
}

TEST_CASE("a rank with a different gradient list: every rank gets MismatchError naming it") {
  const std::vector<GradientSpec> list{
      {DataType::float32, 4}, {DataType::float32, 8}, {DataType::int32, 3}, {DataType::float32, 2}};
  struct Case {
    const char* what;
    std::vector<GradientSpec> odd;
    BucketOptions options;
    const char* expected;
  };
  const BucketOptions same{};
  const std::vector<Case> cases{
      {"a count",
       {{DataType::float32, 4},
        {DataType::float32, 8},
        {DataType::int32, 4},
        {DataType::float32, 2}},
       same,
       "gradient 2 is int32[3] on rank 0 and int32[4]"},
      {"a type",
       {{DataType::float32, 4},
        {DataType::float64, 8},
        {DataType::int32, 3},
        {DataType::float32, 2}},
       same,
       "gradient 1 is float[8] on rank 0 and double[8]"},
      {"one gradient fewer",
       {{DataType::float32, 4}, {DataType::float32, 8}, {DataType::int32, 3}},
       same,
       "gradient 3 is float[2] on rank 0 and no such gradient"},
      {"no gradients", {}, same, "gradient 0 is float[4] on rank 0 and no such gradient"},
      {"the caps", list, BucketOptions{.bucket_bytes = 64, .first_bucket_bytes = 8},
       "the bucket options differ"},
      {"the compression", list, BucketOptions{.compression = strata::fusion::Compression::bfloat16},
       "the bucket options differ"}};
  for (const Case& c : cases) {
    CAPTURE(c.what);
    strata::testing::RankTeam<Local> team(3, CommunicatorOptions{.timeout = 5s});
    std::vector<std::vector<float>> unused(3);
    const auto failures = team.run([&](int rank) {
      const bool odd = rank == 2;
      GradientBuckets<Local> buckets(team[rank], odd ? c.odd : list, odd ? c.options : same);
      for (std::size_t g = 0; g < (odd ? c.odd : list).size(); ++g)
        buckets.ready(g);
      buckets.wait();
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      REQUIRE(holds<strata::MismatchError>(failures[static_cast<std::size_t>(r)]));
      if (r == 2) CHECK(contains(message_of(failures[2]), c.expected));
    }
  }
}

TEST_CASE("a peer that aborts in the middle of a bucketed step fails every rank's step") {
  strata::testing::RankTeam<Local> team(3, CommunicatorOptions{.timeout = 20s});
  std::vector<Gradients> grads(3, Gradients({{DataType::float32, 100},
                                             {DataType::float32, 100},
                                             {DataType::float32, 100},
                                             {DataType::float32, 100}}));
  const auto failures = team.run([&](int rank) {
    auto& mine = grads[static_cast<std::size_t>(rank)];
    mine.fill(rank, 0);
    // 400-byte buckets: one per gradient.
    GradientBuckets<Local> buckets(team[rank], mine.refs(),
                                   BucketOptions{.bucket_bytes = 400, .first_bucket_bytes = 400});
    buckets.ready(0);
    buckets.ready(1);
    if (rank == 1) team[rank].abort("injected in the middle of the step");
    buckets.ready(2);
    buckets.ready(3);
    buckets.wait();
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE(failures[static_cast<std::size_t>(r)]);
    CHECK(contains(message_of(failures[static_cast<std::size_t>(r)]), "injected"));
  }
}

TEST_CASE("a peer that stops making gradients ready: the others' step ends at the deadline") {
  strata::testing::RankTeam<Local> team(2, CommunicatorOptions{.timeout = 300ms});
  std::vector<Gradients> grads(2, Gradients({{DataType::float64, 50}, {DataType::float64, 50}}));
  std::vector<std::exception_ptr> later(2);
  const auto failures = team.run([&](int rank) {
    auto& mine = grads[static_cast<std::size_t>(rank)];
    GradientBuckets<Local> buckets(team[rank], mine.refs(),
                                   BucketOptions{.bucket_bytes = 400, .first_bucket_bytes = 400});
    buckets.ready(0);
    if (rank == 0) {
      buckets.ready(1);
      try {
        buckets.wait();
      } catch (...) {
        // The failed step's error again, from any later call.
        try {
          buckets.ready(0);
        } catch (...) {
          later[0] = std::current_exception();
        }
        throw;
      }
    }
  });
  REQUIRE(holds<strata::TimeoutError>(failures[0]));
  CHECK(holds<strata::TimeoutError>(later[0]));
}

// float32 gradients travel as 16-bit floats: each rank's value rounded, the ranks' values
// added in float in rank order (the in-process reduction), the sum rounded once and widened.
template <class Half>
void check_compressed(strata::fusion::Compression compression, bool in_buckets) {
  constexpr int n = 3;
  strata::testing::RankTeam<Local> team(n);
  const std::vector<GradientSpec> list{{DataType::float32, 1021}, {DataType::float64, 7},
                                       {DataType::float32, 0},    {DataType::float32, 4099},
                                       {DataType::int32, 5},      {DataType::float32, 1}};
  const BucketOptions options{
      .bucket_bytes = 8192, .first_bucket_bytes = 1024, .compression = compression};
  std::vector<Gradients> grads(n, Gradients(list));
  std::vector<std::unique_ptr<GradientBuckets<Local>>> buckets(n);
  for (int r = 0; r < n; ++r) {
    auto& mine = grads[static_cast<std::size_t>(r)];
    buckets[static_cast<std::size_t>(r)] =
        in_buckets ? std::make_unique<GradientBuckets<Local>>(team[r], list, options)
                   : std::make_unique<GradientBuckets<Local>>(team[r], mine.refs(), options);
  }
  for (int step = 0; step < 2; ++step) {
    team.run_or_throw([&](int rank) {
      auto& mine = grads[static_cast<std::size_t>(rank)];
      auto& fused = *buckets[static_cast<std::size_t>(rank)];
      mine.fill(rank, step);
      for (std::size_t g = list.size(); g-- > 0;) {
        // The trainer writes its gradient into the bucket, then reads the result there.
        if (in_buckets) mine.write_into(fused, g);
        fused.ready(g);
      }
      fused.wait();
      if (in_buckets) {
        for (std::size_t g = 0; g < list.size(); ++g)
          mine.read_from(fused, g);
      }
    });
    // The reference, from each rank's inputs.
    std::vector<Gradients> inputs(n, Gradients(list));
    for (int r = 0; r < n; ++r)
      inputs[static_cast<std::size_t>(r)].fill(r, step);
    for (std::size_t g = 0; g < list.size(); ++g) {
      for (std::size_t k = 0; k < list[g].count; ++k) {
        if (list[g].type == DataType::float32) {
          float sum = 0.0f;
          for (int r = 0; r < n; ++r) {
            sum += static_cast<float>(Half(inputs[static_cast<std::size_t>(r)].f32[g][k]));
          }
          const float expected = static_cast<float>(Half(sum));
          for (int r = 0; r < n; ++r) {
            REQUIRE(std::memcmp(&grads[static_cast<std::size_t>(r)].f32[g][k], &expected,
                                sizeof(float)) == 0);
          }
        } else if (list[g].type == DataType::float64) {
          double sum = 0.0;
          for (int r = 0; r < n; ++r)
            sum += inputs[static_cast<std::size_t>(r)].f64[g][k];
          for (int r = 0; r < n; ++r)
            REQUIRE(grads[static_cast<std::size_t>(r)].f64[g][k] == sum);
        }
      }
    }
  }
}

TEST_CASE("float32 gradients as bfloat16 or float16 on the wire") {
  for (const bool in_buckets : {false, true}) {
    CAPTURE(in_buckets);
    check_compressed<bfloat16>(strata::fusion::Compression::bfloat16, in_buckets);
    check_compressed<strata::float16>(strata::fusion::Compression::float16, in_buckets);
  }
}

TEST_CASE("misuse is a UsageError") {
  strata::testing::RankTeam<Local> team(1);
  std::vector<float> a(3, 1.0f), b(2, 2.0f);
  GradientBuckets<Local> buckets(team[0],
                                 std::vector<GradientRef>{strata::fusion::gradient(std::span(a)),
                                                          strata::fusion::gradient(std::span(b))});
  CHECK_THROWS_AS(buckets.ready(2), strata::UsageError);
  buckets.ready(0);
  CHECK_THROWS_AS(buckets.ready(0), strata::UsageError);
  CHECK_THROWS_WITH_AS(buckets.wait(), doctest::Contains("gradient 1 was not made ready"),
                       strata::UsageError);
  buckets.ready(1);
  buckets.wait();
  CHECK(a == std::vector<float>(3, 1.0f));  // a group of one: the sum is the value
}

TEST_CASE("rebind points the buckets at new buffers of the same list, between steps") {
  strata::testing::RankTeam<Local> team(2);
  team.run_or_throw([&](int r) {
    Local& comm = team[r];
    const float rank = static_cast<float>(r);
    std::vector<float> a(3, rank), b(1000, rank);
    GradientBuckets<Local> buckets(comm,
                                   std::vector<GradientRef>{strata::fusion::gradient(std::span(a)),
                                                            strata::fusion::gradient(std::span(b))},
                                   {.bucket_bytes = 64, .first_bucket_bytes = 16});
    // New buffers: the sums land there, and the old ones are left alone.
    std::vector<float> c(3, rank + 1), d(1000, rank + 1);
    const std::vector<GradientRef> moved{strata::fusion::gradient(std::span(c)),
                                         strata::fusion::gradient(std::span(d))};
    buckets.rebind(moved);
    buckets.ready(1);
    CHECK_THROWS_AS(buckets.rebind(moved), strata::UsageError);  // in the middle of a step
    buckets.ready(0);
    buckets.wait();
    CHECK(c == std::vector<float>(3, 3.0f));
    CHECK(d == std::vector<float>(1000, 3.0f));
    CHECK(a == std::vector<float>(3, rank));
    CHECK(b == std::vector<float>(1000, rank));
    // Another list is refused.
    std::vector<float> e(4);
    CHECK_THROWS_AS(
        buckets.rebind(std::vector<GradientRef>{strata::fusion::gradient(std::span(e)),
                                                strata::fusion::gradient(std::span(d))}),
        strata::UsageError);
  });
}

}  // namespace

TEST_CASE("a GradientRef made by hand, without its type's kernels, is a UsageError") {
  strata::testing::RankTeam<Local> team(1);
  std::vector<float> a(3, 1.0f);
  std::vector<double> b(2, 2.0);
  const GradientRef made = strata::fusion::gradient(std::span(a));
  const GradientRef by_hand{DataType::float64, reinterpret_cast<std::byte*>(b.data()), b.size()};
  CHECK_THROWS_WITH_AS(GradientBuckets<Local>(team[0], std::vector<GradientRef>{made, by_hand}),
                       doctest::Contains("gradient 1 (double) carries no reduction kernels"),
                       strata::UsageError);
  // Kernels of another type than the buffer's are refused as well.
  GradientRef mislabelled = made;
  mislabelled.type = DataType::float64;
  CHECK_THROWS_WITH_AS(GradientBuckets<Local>(team[0], std::vector<GradientRef>{mislabelled}),
                       doctest::Contains("gradient 0 (double) carries float reduction kernels"),
                       strata::UsageError);
}

// strata's communicators take the buckets' checked calls; a user's communicator that offers
// only the typed calls gets typed calls, and the same results.
static_assert(strata::communicator::detail::CallAccess::kTakesCalls<Local>);
static_assert(strata::communicator::detail::CallAccess::kTakesCalls<TcpCommunicator>);
static_assert(
    !strata::communicator::detail::CallAccess::kTakesCalls<strata::testing::LoopbackCommunicator>);

TEST_CASE("a communicator of the user's own that takes only typed calls") {
  auto group = strata::testing::LoopbackCommunicator::create(1);
  std::vector<float> a(5, 1.5f);
  std::vector<std::int32_t> b(3, 7);
  std::vector<double> c(4, -2.0);
  GradientBuckets<strata::testing::LoopbackCommunicator> buckets(
      group[0],
      std::vector<GradientRef>{strata::fusion::gradient(std::span(a)),
                               strata::fusion::gradient(std::span(b)),
                               strata::fusion::gradient(std::span(c))},
      {.bucket_bytes = 16, .first_bucket_bytes = 8});
  for (int step = 0; step < 2; ++step) {
    buckets.ready(2);
    buckets.ready(0);
    buckets.ready(1);
    buckets.wait();
  }
  // A group of one: every sum is the rank's own value.
  CHECK(a == std::vector<float>(5, 1.5f));
  CHECK(b == std::vector<std::int32_t>(3, 7));
  CHECK(c == std::vector<double>(4, -2.0));
}

TEST_CASE("a completed bucket is copied out by a ready that starts a later one") {
  // Bucket 0 holds gradients 0 and 1 (small), bucket 1 gradients 2 and 3 (large). Each rank
  // pauses after bucket 0 starts, so it usually completes first; ready(3) then starts bucket 1
  // and, while that all-reduce runs, copies bucket 0 out before wait(). Whether a step's
  // all-reduce beats the pause depends on the machine, so the check is that some step of ten
  // saw it, and that every step's results are right.
  strata::testing::RankTeam<Local> team(2);
  std::vector<int> early(2, 0);
  team.run_or_throw([&](int r) {
    std::vector<std::vector<float>> grads{std::vector<float>(4), std::vector<float>(4),
                                          std::vector<float>(65536), std::vector<float>(65536)};
    std::vector<GradientRef> refs;
    for (auto& g : grads)
      refs.push_back(strata::fusion::gradient(std::span(g)));
    GradientBuckets<Local> buckets(
        team[r], refs, {.bucket_bytes = std::size_t{512} << 10, .first_bucket_bytes = 32});
    REQUIRE(buckets.plan().buckets().size() == 2);
    const auto sum = [](int step, std::size_t g) {
      // Rank r's value of gradient g is step · 10 + g + r; summed over the two ranks:
      return static_cast<float>(2 * (step * 10 + static_cast<int>(g)) + 1);
    };
    for (int step = 0; step < 10; ++step) {  // as many on every rank: they pair up
      for (std::size_t g = 0; g < grads.size(); ++g)
        std::fill(grads[g].begin(), grads[g].end(),
                  static_cast<float>(step * 10 + static_cast<int>(g) + r));
      buckets.ready(0);
      buckets.ready(1);
      std::this_thread::sleep_for(20ms);
      buckets.ready(2);
      buckets.ready(3);
      if (grads[0] == std::vector<float>(4, sum(step, 0))) ++early[static_cast<std::size_t>(r)];
      buckets.wait();
      for (std::size_t g = 0; g < grads.size(); ++g)
        CHECK(grads[g] == std::vector<float>(grads[g].size(), sum(step, g)));
    }
  });
  CHECK(early[0] > 0);
  CHECK(early[1] > 0);
}
