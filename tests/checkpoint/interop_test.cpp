// strata's checkpoints against a safetensors reader and writer written from the specification
// alone (tests/checkpoint/safetensors_reference.py: json, struct and numpy): it reads what
// strata writes, and strata reads what it writes, every element type strata has, with values
// both sides compute from the same formula.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/checkpoint/checkpoint.hpp>
#include <strata/core/bfloat16.hpp>
#include <strata/core/float16.hpp>

namespace {

namespace fs = std::filesystem;
using strata::bfloat16;
using strata::float16;

const fs::path kScript = fs::path(__FILE__).parent_path() / "safetensors_reference.py";

// A python3 with numpy: Debian's (python3-numpy, scripts/install-deps) before whatever else is
// on PATH, which may lack numpy.
std::optional<std::string> python_with_numpy() {
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0)
      return std::string(candidate);
  return std::nullopt;
}

int run_script(const std::string& mode, const fs::path& file) {
  const auto python = python_with_numpy();
  REQUIRE_MESSAGE(python.has_value(),
                  "no python3 with numpy: install python3-numpy (scripts/install-deps does)");
  return std::system(
      (*python + " " + kScript.string() + " " + mode + " '" + file.string() + "'").c_str());
}

// The formula of safetensors_reference.py's expected_values.
double float_value(std::size_t i) {
  return static_cast<double>(i % 17) * 0.25 - 2.0;
}

template <class T>
std::vector<T> floats(std::size_t n) {
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = T(static_cast<float>(float_value(i)));
  return out;
}

struct Tensors {
  std::vector<float> weights = floats<float>(30);
  std::vector<double> bias = floats<double>(7);
  std::vector<float16> half = floats<float16>(13);
  std::vector<bfloat16> brain = floats<bfloat16>(16);
  std::vector<std::int8_t> small;
  std::vector<std::uint8_t> bytes;
  std::vector<std::int32_t> ints;
  std::int64_t step = 3 * 1000000000007LL;
  std::vector<float> empty;

  Tensors() {
    for (std::int64_t i = 0; i < 11; ++i)
      small.push_back(static_cast<std::int8_t>((i * 7) % 200 - 100));
    for (std::int64_t i = 0; i < 3; ++i)
      bytes.push_back(static_cast<std::uint8_t>((i * 7) % 256));
    for (std::int64_t i = 0; i < 5; ++i)
      ints.push_back(static_cast<std::int32_t>((i - 2) * 100000007));
  }

  void track(strata::checkpoint::Checkpoint& checkpoint) {
    checkpoint.track("weights", std::span(weights), {2, 3, 5});
    checkpoint.track("bias", std::span(bias));
    checkpoint.track("half", std::span(half));
    checkpoint.track("brain", std::span(brain), {4, 4});
    checkpoint.track("small", std::span(small));
    checkpoint.track("bytes", std::span(bytes));
    checkpoint.track("ints", std::span(ints));
    checkpoint.track("step", step);
    checkpoint.track("empty", std::span(empty), {0, 4});
  }
};

fs::path scratch(const char* name) {
  const fs::path dir = fs::temp_directory_path() / ("strata_interop_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("a reader written from the specification reads strata's checkpoint") {
  Tensors tensors;
  strata::checkpoint::Checkpoint checkpoint;
  tensors.track(checkpoint);
  checkpoint.set_user_metadata(R"({"model": "interop"})");
  const fs::path file = scratch("strata.safetensors");
  checkpoint.save(file);
  CHECK(run_script("check", file) == 0);
  fs::remove_all(file.parent_path());
}

TEST_CASE("strata reads a checkpoint written by a writer from the specification") {
  const fs::path file = scratch("reference.safetensors");
  REQUIRE(run_script("write", file) == 0);
  const Tensors expected;
  Tensors restored;
  restored.weights.assign(30, 0.0f);
  restored.bias.assign(7, 0.0);
  restored.half.assign(13, float16(0.0f));
  restored.brain.assign(16, bfloat16(0.0f));
  restored.small.assign(11, 0);
  restored.bytes.assign(3, 0);
  restored.ints.assign(5, 0);
  restored.step = 0;
  strata::checkpoint::Checkpoint checkpoint;
  restored.track(checkpoint);
  checkpoint.restore(file);
  CHECK(restored.weights == expected.weights);
  CHECK(restored.bias == expected.bias);
  for (std::size_t i = 0; i < expected.half.size(); ++i)
    CHECK(static_cast<float>(restored.half[i]) == static_cast<float>(expected.half[i]));
  for (std::size_t i = 0; i < expected.brain.size(); ++i)
    CHECK(static_cast<float>(restored.brain[i]) == static_cast<float>(expected.brain[i]));
  CHECK(restored.small == expected.small);
  CHECK(restored.bytes == expected.bytes);
  CHECK(restored.ints == expected.ints);
  CHECK(restored.step == expected.step);
  const auto header = strata::checkpoint::Checkpoint::read_header(file);
  CHECK(header.metadata.at("writer") == "safetensors_reference.py");
  CHECK(header.data_start % 8 == 0);
  fs::remove_all(file.parent_path());
}
