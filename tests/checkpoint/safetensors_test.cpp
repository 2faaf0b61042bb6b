// The safetensors header: what encode_header writes and what parse_header accepts, rule by rule
// of the format (offsets that tile the data, sizes from shape and dtype, the 8-byte padding,
// metadata of strings).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <strata/checkpoint/safetensors.hpp>
#include <strata/core/error.hpp>

namespace {

using strata::CheckpointError;
using strata::DataType;
using strata::checkpoint::encode_header;
using strata::checkpoint::parse_header;
using strata::checkpoint::TensorInfo;

std::string json_of(const std::string& encoded) {
  return encoded.substr(8);
}

}  // namespace

TEST_CASE("dtype names are safetensors' and cover every element type") {
  using strata::checkpoint::data_type_from_safetensors;
  using strata::checkpoint::safetensors_dtype;
  for (int i = 0; i < 8; ++i) {
    const auto type = static_cast<DataType>(i);
    CHECK(data_type_from_safetensors(safetensors_dtype(type)) == type);
  }
  CHECK(safetensors_dtype(DataType::bfloat16) == "BF16");
  CHECK(safetensors_dtype(DataType::float16) == "F16");
  CHECK_FALSE(data_type_from_safetensors("BOOL").has_value());
  CHECK_FALSE(data_type_from_safetensors("f32").has_value());
}

TEST_CASE("encode_header pads to 8 bytes and parse_header reads it back") {
  const std::vector<TensorInfo> tensors{
      {"w", DataType::float64, {2, 2}, 0, 32},
      {"empty", DataType::float32, {0, 3}, 32, 32},
      {"scalar", DataType::int32, {}, 32, 36},
      {"b", DataType::bfloat16, {3}, 36, 42},
  };
  const std::map<std::string, std::string> metadata{{"k", "v"}, {"strata.format", "x"}};
  const std::string encoded = encode_header(tensors, metadata);
  CHECK(encoded.size() % 8 == 0);
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | static_cast<unsigned char>(encoded[static_cast<std::size_t>(i)]);
  CHECK(length == encoded.size() - 8);
  const auto header = parse_header(json_of(encoded), 42, "test");
  CHECK(header.data_start == encoded.size());
  CHECK(header.metadata == metadata);
  REQUIRE(header.tensors.size() == 4);
  // In offset order; the empty tensor and the scalar share offset 32.
  CHECK(header.tensors[0] == tensors[0]);
  CHECK(header.tensors[1] == tensors[1]);
  CHECK(header.tensors[2] == tensors[2]);
  CHECK(header.tensors[3] == tensors[3]);
}

TEST_CASE("encode_header refuses a layout the format forbids") {
  CHECK_THROWS_AS(encode_header(std::vector<TensorInfo>{{"a", DataType::float32, {2}, 0, 4}}, {}),
                  strata::UsageError);
  CHECK_THROWS_AS(encode_header(std::vector<TensorInfo>{{"a", DataType::float32, {1}, 4, 8}}, {}),
                  strata::UsageError);
  CHECK_THROWS_AS(encode_header(std::vector<TensorInfo>{{"a", DataType::uint8, {1}, 0, 1},
                                                        {"a", DataType::uint8, {1}, 1, 2}},
                                {}),
                  strata::UsageError);
  CHECK_THROWS_AS(
      encode_header(std::vector<TensorInfo>{{"__metadata__", DataType::uint8, {1}, 0, 1}}, {}),
      strata::UsageError);
}

TEST_CASE("parse_header rejects each broken rule with a CheckpointError that says which") {
  const auto rejects = [](const std::string& json, std::uint64_t data_bytes, const char* what) {
    CHECK_THROWS_WITH_AS(parse_header(json, data_bytes, "f.safetensors"), doctest::Contains(what),
                         CheckpointError);
  };
  rejects(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
          8, "tensors overlap or leave a hole");
  rejects(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8,
          "starts at byte 4");
  rejects(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8,
          "cover 4 bytes of the 8");
  rejects(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 16]}})", 8,
          "not within the 8 bytes");
  rejects(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8,
          "hold 8 bytes, but its shape and dtype need 12");
  rejects(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
          0, "over 2^64");
  rejects(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0,
          "not a non-negative integer");
  rejects(R"({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", 1,
          "dtype 'F8_E4M3' is not one strata reads");
  rejects(R"({"a": {"shape": [1], "data_offsets": [0, 1]}})", 1, "no dtype string");
  rejects(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", 1,
          "data_offsets is not a pair");
  rejects(R"({"__metadata__": {"k": 1}})", 0, "__metadata__ entry 'k' is not a string");
  rejects(R"({"__metadata__": []})", 0, "__metadata__ is not an object");
  rejects(R"([1, 2])", 0, "does not start with '{'");
  rejects("{\"\xc3\x28\": 1}", 0, "not JSON (or not UTF-8)");
  rejects(R"({"a": 1})", 0, "tensor 'a': its entry is not an object");
  // Deep nesting is refused as soon as it is seen, not after the parser spent memory on every
  // level (10 MB of '[' would take it gigabytes), and a nesting up to the cap is only a wrong
  // entry.
  rejects("{\"a\": " + std::string(10'000'000, '['), 0, "nests deeper than 16 levels");
  rejects("{\"a\": " + std::string(15, '[') + std::string(15, ']') + "}", 0,
          "tensor 'a': its entry is not an object");
  // Trailing spaces (the padding) are fine; so is a file with no tensors.
  CHECK(parse_header(R"({}    )", 0, "f").tensors.empty());
}
