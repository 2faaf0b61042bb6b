// The checkpoint reader's fuzz target (tests/support/fuzz/checkpoint.hpp) over its seed corpus
// and bounded random damage to valid checkpoints, so that every build checks what the fuzzer
// checks: any bytes give a CheckpointError or a header that keeps the format's rules, and a
// failed restore changes nothing.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/data/sampler.hpp>
#include <strata/optim/adam.hpp>
#include <strata/placement/variable.hpp>

#include "fuzz/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A valid checkpoint of what the fuzz target tracks, with an extra tensor.
std::vector<std::uint8_t> valid_checkpoint() {
  const fs::path file = fs::temp_directory_path() /
                        ("strata_reader_random_" + std::to_string(::getpid()) + ".safetensors");
  std::vector<float> a{1.0f, 2.0f, 3.0f};
  std::vector<double> extra{4.0, 5.0};
  std::int64_t step = 9;
  const strata::data::EpochSampler sampler({.num_examples = 10, .global_batch = 4, .seed = 1});
  strata::data::SamplerPosition position{0, 2};
  strata::checkpoint::Checkpoint checkpoint;
  checkpoint.track("a", std::span(a));
  checkpoint.track("extra", std::span(extra));
  checkpoint.track("step", step);
  checkpoint.track("data", sampler, position);
  // The variable with an Adam state two updates in.
  const strata::optim::Adam adam{.learning_rate = 0.1};
  const std::vector<float> gradient{0.5f, 1.0f, -2.0f};
  strata::placement::Variable<float, std::allocator<float>> w(
      2, std::vector<float>{1.0f, 0.0f, -1.0f}, strata::placement::VariableAggregation::mean);
  for (int update = 0; update < 2; ++update)
    for (std::size_t c = 0; c < 2; ++c)
      adam.apply(w.copy(c), gradient, w.optimizer_state(c, adam));
  checkpoint.track("w", w, {3});
  checkpoint.save(file);
  auto bytes = read_file(file);
  fs::remove(file);
  return bytes;
}

}  // namespace

TEST_CASE("every file of the seed corpus passes through the fuzz target") {
  const fs::path corpus =
      fs::path(__FILE__).parent_path().parent_path() / "fuzz" / "corpus" / "checkpoint";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    strata::testing::fuzz_checkpoint(read_file(entry.path()));
    ++files;
  }
  CHECK(files >= 3);
}

TEST_CASE("a valid checkpoint restores through the fuzz target, and damaged copies fail cleanly") {
  const std::vector<std::uint8_t> valid = valid_checkpoint();
  strata::testing::fuzz_checkpoint(valid);
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::uint8_t> bytes = valid;
    switch (random() % 5) {
      case 0:  // truncated
        bytes.resize(random() % bytes.size());
        break;
      case 1:  // flipped bytes, in the header mostly
        for (int flips = 1 + static_cast<int>(random() % 4); flips > 0; --flips)
          bytes[random() % std::min<std::size_t>(bytes.size(), 200)] ^=
              static_cast<std::uint8_t>(1u << (random() % 8));
        break;
      case 2:  // a digit of the JSON changed: offsets and shapes that lie
        for (std::size_t i = 8 + random() % (bytes.size() - 8); i < bytes.size(); ++i)
          if (bytes[i] >= '0' && bytes[i] <= '9') {
            bytes[i] = static_cast<std::uint8_t>('0' + random() % 10);
            break;
          }
        break;
      case 3:  // flipped bytes in the data: values, optimizer slots and steps that lie
        for (int flips = 1 + static_cast<int>(random() % 4); flips > 0; --flips)
          bytes[bytes.size() - 1 - random() % 96] ^=
              static_cast<std::uint8_t>(1u << (random() % 8));
        break;
      default:  // bytes appended or a random header length
        if (random() % 2 == 0) {
          bytes.push_back(static_cast<std::uint8_t>(random()));
        } else {
          const std::uint64_t length = random() >> (random() % 64);
          for (int i = 0; i < 8; ++i)
            bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(length >> (8 * i));
        }
    }
    strata::testing::fuzz_checkpoint(bytes);
  }
}

TEST_CASE("random bytes never crash the reader") {
  std::mt19937_64 random(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::uint8_t> bytes(random() % 64);
    for (auto& b : bytes)
      b = static_cast<std::uint8_t>(random());
    if (bytes.size() >= 9 && random() % 2 == 0) {  // a plausible length and a '{'
      const std::uint64_t length = bytes.size() - 8 - random() % (bytes.size() - 8);
      for (int i = 0; i < 8; ++i)
        bytes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(length >> (8 * i));
      bytes[8] = '{';
    }
    strata::testing::fuzz_checkpoint(bytes);
  }
}
