// Checkpoint: what it saves and restores (variables with their optimizer state, counters, the
// sampler's position, extra tensors, user metadata), and the errors of a restore that does not
// fit, each of which leaves everything tracked unchanged.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/core/error.hpp>
#include <strata/data/sampler.hpp>
#include <strata/optim/adam.hpp>
#include <strata/optim/momentum.hpp>
#include <strata/placement/variable.hpp>

namespace {

namespace fs = std::filesystem;
using strata::CheckpointError;
using strata::checkpoint::Checkpoint;
template <class T>
using Variable = strata::placement::Variable<T, std::allocator<T>>;
using strata::placement::VariableAggregation;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("strata_checkpoint_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

std::vector<float> iota(std::size_t n, float start) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = start + 0.5f * static_cast<float>(i);
  return out;
}

// Runs `f`, which must throw a CheckpointError whose message holds every one of `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL("no CheckpointError");
  } catch (const CheckpointError& e) {
    for (const auto& part : parts)
      CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, std::string(e.what()),
                    "\n  lacks: ", part);
  }
}

// One Adam update per copy, as a Mirrored step applies it on every replica.
template <class T>
void update(Variable<T>& variable, const strata::optim::Adam& adam, std::span<const T> gradient) {
  for (std::size_t c = 0; c < variable.num_copies(); ++c)
    adam.apply(variable.copy(c), gradient, variable.optimizer_state(c, adam));
}

}  // namespace

TEST_CASE("a variable restores with its optimizer state, and training continues bit for bit") {
  Scratch scratch;
  const strata::optim::Adam adam{.learning_rate = 0.01};
  const std::vector<float> gradient = iota(37, -3.0f);
  Variable<float> trained(2, iota(37, 1.0f), VariableAggregation::mean);
  for (int step = 0; step < 3; ++step)
    update<float>(trained, adam, gradient);
  Checkpoint saving;
  saving.track("dense/kernel", trained, {37});
  saving.save(scratch.dir / "a.safetensors");

  Variable<float> resumed(2, std::vector<float>(37, 0.0f), VariableAggregation::mean);
  Checkpoint restoring;
  restoring.track("dense/kernel", resumed, {37});
  restoring.restore(scratch.dir / "a.safetensors");
  for (std::size_t c = 0; c < 2; ++c) {
    CHECK(std::vector<float>(resumed.copy(c).begin(), resumed.copy(c).end()) ==
          std::vector<float>(trained.read().begin(), trained.read().end()));
    REQUIRE(resumed.optimizer_state(c) != nullptr);
    CHECK(resumed.optimizer_state(c)->step == 3);
    CHECK(resumed.optimizer_state(c)->slots == trained.optimizer_state(0)->slots);
  }
  // Two more steps on both: the same bits, as if never interrupted.
  for (int step = 0; step < 2; ++step) {
    update<float>(trained, adam, gradient);
    update<float>(resumed, adam, gradient);
  }
  CHECK(std::vector<float>(resumed.read().begin(), resumed.read().end()) ==
        std::vector<float>(trained.read().begin(), trained.read().end()));

  // The file says what it holds: value, slots [2, 37] (Adam's m and v), step.
  const auto header = Checkpoint::read_header(scratch.dir / "a.safetensors");
  REQUIRE(header.find("dense/kernel/.optimizer/slots") != nullptr);
  CHECK(header.find("dense/kernel/.optimizer/slots")->shape == std::vector<std::uint64_t>{2, 37});
  CHECK(header.find("dense/kernel/.optimizer/step")->dtype == strata::DataType::int64);
  CHECK(header.metadata.at("strata.format") == "strata-checkpoint-1");
}

TEST_CASE("an optimizer step no optimizer counts to is a damaged file, and changes nothing") {
  Scratch scratch;
  const strata::optim::Adam adam{.learning_rate = 0.01};
  const std::vector<float> gradient = iota(5, -1.0f);
  Variable<float> trained(1, iota(5, 1.0f), VariableAggregation::none);
  update<float>(trained, adam, gradient);
  Checkpoint saving;
  saving.track("w", trained, {5});
  const fs::path file = scratch.dir / "step.safetensors";
  saving.save(file);
  const auto header = Checkpoint::read_header(file);
  const auto* step = header.find("w/.optimizer/step");
  REQUIRE(step != nullptr);

  for (const std::int64_t bad : {std::int64_t{-1}, std::numeric_limits<std::int64_t>::max()}) {
    CAPTURE(bad);
    {
      std::fstream patch(file, std::ios::binary | std::ios::in | std::ios::out);
      patch.seekp(static_cast<std::streamoff>(header.data_start + step->begin));
      patch.write(reinterpret_cast<const char*>(&bad), sizeof bad);
    }
    Variable<float> resumed(1, std::vector<float>(5, 0.0f), VariableAggregation::none);
    Checkpoint restoring;
    restoring.track("w", resumed, {5});
    expect_error([&] { restoring.restore(file); },
                 {file.string(), "variable 'w' has optimizer step " + std::to_string(bad),
                  "this one is damaged"});
    CHECK(resumed.read()[0] == 0.0f);
    CHECK(resumed.optimizer_state(0) == nullptr);
  }
}

TEST_CASE("a variable saved before its first update restores without optimizer state") {
  Scratch scratch;
  Variable<double> fresh(1, std::vector<double>{1.0, 2.0}, VariableAggregation::none);
  Checkpoint saving;
  saving.track("w", fresh);
  saving.save(scratch.dir / "fresh.safetensors");
  CHECK(Checkpoint::read_header(scratch.dir / "fresh.safetensors").tensors.size() == 1);

  Variable<double> updated(1, std::vector<double>{0.0, 0.0}, VariableAggregation::none);
  const strata::optim::Momentum momentum{.learning_rate = 0.1, .momentum = 0.9};
  const std::vector<double> gradient{1.0, 1.0};
  momentum.apply(updated.copy(0), gradient, updated.optimizer_state(0, momentum));
  Checkpoint restoring;
  restoring.track("w", updated);
  restoring.restore(scratch.dir / "fresh.safetensors");
  CHECK(updated.read()[1] == 2.0);
  CHECK(updated.optimizer_state(0) == nullptr);
}

TEST_CASE("a 0-element variable keeps its optimizer's slot count through a checkpoint") {
  Scratch scratch;
  const strata::optim::Adam adam{};
  Variable<float> empty(1, std::vector<float>{}, VariableAggregation::none);
  update<float>(empty, adam, std::vector<float>{});
  Checkpoint saving;
  saving.track("empty", empty);
  saving.save(scratch.dir / "empty.safetensors");
  CHECK(Checkpoint::read_header(scratch.dir / "empty.safetensors")
            .find("empty/.optimizer/slots")
            ->shape == std::vector<std::uint64_t>{2, 0});
  Variable<float> restored(1, std::vector<float>{}, VariableAggregation::none);
  Checkpoint restoring;
  restoring.track("empty", restored);
  restoring.restore(scratch.dir / "empty.safetensors");
  CHECK(restored.optimizer_slots_per_element(0) == 2);
  CHECK(restored.optimizer_state(0)->step == 1);
  CHECK_NOTHROW(update<float>(restored, adam, std::vector<float>{}));
}

TEST_CASE("another optimizer after a restore is the update's usage error") {
  Scratch scratch;
  Variable<float> trained(1, iota(4, 0.0f), VariableAggregation::none);
  update<float>(trained, strata::optim::Adam{}, iota(4, 1.0f));
  Checkpoint saving;
  saving.track("w", trained);
  saving.save(scratch.dir / "adam.safetensors");
  Variable<float> restored(1, iota(4, 0.0f), VariableAggregation::none);
  Checkpoint restoring;
  restoring.track("w", restored);
  restoring.restore(scratch.dir / "adam.safetensors");
  const strata::optim::Momentum momentum{};
  CHECK_THROWS_AS(restored.optimizer_state(0, momentum), strata::UsageError);
}

TEST_CASE("counters, extra tensors, the sampler's position and user metadata round-trip") {
  Scratch scratch;
  std::int64_t global_step = 1234;
  std::vector<std::int32_t> histogram{3, 1, 4, 1, 5};
  const strata::data::EpochSampler sampler({.num_examples = 100, .global_batch = 8, .seed = 42});
  strata::data::SamplerPosition position{3, 7};
  Checkpoint saving;
  saving.track("global_step", global_step);
  saving.track("histogram", std::span(histogram));
  saving.track("input", sampler, position);
  saving.set_user_metadata(R"({"learning_rate": 0.1, "note": "π"})");
  saving.save(scratch.dir / "b.safetensors");

  std::int64_t step = 0;
  std::vector<std::int32_t> counts(5, 0);
  strata::data::SamplerPosition where;
  Checkpoint restoring;
  restoring.track("global_step", step);
  restoring.track("histogram", std::span(counts));
  restoring.track("input", sampler, where);
  restoring.restore(scratch.dir / "b.safetensors");
  CHECK(step == 1234);
  CHECK(counts == histogram);
  CHECK(where == position);
  CHECK(restoring.user_metadata() == R"({"learning_rate": 0.1, "note": "π"})");
  CHECK(sampler.next(where) == strata::data::SamplerPosition{3, 8});
  CHECK(sampler.next({3, 12}) == strata::data::SamplerPosition{4, 0});
}

TEST_CASE("a restore that does not fit names what differs and changes nothing") {
  Scratch scratch;
  const fs::path file = scratch.dir / "c.safetensors";
  Variable<float> w(1, iota(6, 1.0f), VariableAggregation::none);
  std::int64_t step = 5;
  const strata::data::EpochSampler sampler({.num_examples = 100, .global_batch = 8, .seed = 42});
  strata::data::SamplerPosition position{1, 2};
  Checkpoint saving;
  saving.track("w", w, {2, 3});
  saving.track("step", step);
  saving.track("input", sampler, position);
  saving.save(file);

  std::vector<float> untouched(6, -1.0f);
  std::int64_t counter = -1;
  const auto expect_unchanged = [&] {
    CHECK(untouched == std::vector<float>(6, -1.0f));
    CHECK(counter == -1);
  };
  SUBCASE("another shape") {
    Variable<float> other(1, std::vector<float>(6, 0.0f), VariableAggregation::none);
    Checkpoint restoring;
    restoring.track("step", counter);
    restoring.track("w", other, {3, 2});
    expect_error([&] { restoring.restore(file); },
                 {"variable 'w' is F32 [3, 2] here but F32 [2, 3]"});
    CHECK(other.read()[0] == 0.0f);
  }
  SUBCASE("another element type") {
    Variable<double> other(1, std::vector<double>(6, 0.0), VariableAggregation::none);
    Checkpoint restoring;
    restoring.track("step", counter);
    restoring.track("w", other, {2, 3});
    expect_error([&] { restoring.restore(file); }, {"'w' is F64 [2, 3] here but F32"});
  }
  SUBCASE("a name the file lacks") {
    Checkpoint restoring;
    restoring.track("step", counter);
    restoring.track("bias", std::span(untouched));
    expect_error([&] { restoring.restore(file); }, {"it has no tensor 'bias'"});
  }
  SUBCASE("another sampler") {
    const strata::data::EpochSampler other({.num_examples = 100, .global_batch = 8, .seed = 43});
    strata::data::SamplerPosition where{9, 9};
    Checkpoint restoring;
    restoring.track("step", counter);
    restoring.track("input", other, where);
    expect_error([&] { restoring.restore(file); },
                 {"sampler 'input' was saved with seed 42 (this run: 43)"});
    CHECK(where == strata::data::SamplerPosition{9, 9});
  }
  expect_unchanged();
}

TEST_CASE("a moved checkpoint saves, restores and reports errors as the original would") {
  Scratch scratch;
  std::vector<double> values{1.0, 2.0};
  Checkpoint original(3);
  original.track("values", std::span(values));
  Checkpoint moved(std::move(original));
  moved.save(scratch.dir / "moved.safetensors");
  values[0] = values[1] = 0.0;
  moved.restore(scratch.dir / "moved.safetensors");
  CHECK(values == std::vector<double>{1.0, 2.0});

  std::vector<double> other(2);
  Checkpoint second(3);
  second.track("other", std::span(other));
  Checkpoint target = std::move(second);
  expect_error([&] { target.restore(scratch.dir / "moved.safetensors"); },
               {"rank 3", "it has no tensor 'other'"});
}

TEST_CASE("damaged files are CheckpointErrors that name the file") {
  Scratch scratch;
  std::vector<float> values = iota(64, 0.0f);
  Checkpoint checkpoint;
  checkpoint.track("values", std::span(values));
  const fs::path file = scratch.dir / "d.safetensors";
  checkpoint.save(file);
  const auto size = fs::file_size(file);
  const auto rewrite = [&](auto change) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    change(bytes);
    const fs::path damaged = scratch.dir / "damaged.safetensors";
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
    return damaged;
  };
  const auto expect = [&](const fs::path& damaged, const char* what) {
    std::vector<float> target(64, -1.0f);
    Checkpoint restoring;
    restoring.track("values", std::span(target));
    expect_error([&] { restoring.restore(damaged); }, {damaged.string(), what});
    CHECK(target == std::vector<float>(64, -1.0f));
  };
  expect(rewrite([&](std::string& b) { b.resize(size - 4); }),
         "are not within the 252 bytes of data");
  expect(rewrite([](std::string& b) { b.resize(5); }), "fewer than the 8");
  expect(rewrite([](std::string& b) { b[7] = '\x80'; }), "header length is 9223372036854");
  expect(rewrite([](std::string& b) { b[8] = '['; }), "does not start with '{'");
  expect(rewrite([](std::string& b) {
           const auto at = b.find("F32");
           b.replace(at, 3, "U16");
         }),
         "dtype 'U16' is not one strata reads");
  expect(rewrite([](std::string& b) {
           const auto at = b.find("values");
           b[at] = '\xff';
         }),
         "not JSON (or not UTF-8)");
  CHECK_THROWS_AS(Checkpoint::read_header(scratch.dir / "missing.safetensors"), CheckpointError);
}
