// The TCP wire framing (strata/transport/tcp/frame.hpp): encoding and decoding the 32-byte
// header that precedes every message between two ranks.
//
//   BM_FrameEncode               FrameHeader -> 32 bytes, a new sequence number each call (the
//                                sender's side of every data message)
//   BM_FrameDecode/type:T        32 bytes -> FrameHeader with every field validated, for a data
//                                frame (T=1) and an abort control frame (T=2)
//   BM_FrameDecodeRejected/at:K  a header decode() rejects: at the first check (K=0, bad magic)
//                                and at the last one (K=1, payload above the limit)
//   BM_FrameRoundTrip            encode, decode and compare with the header the receiver
//                                expects: the whole per-message framing cost, both sides
//
// frame.hpp does no per-payload work: no checksum, no chunking; the payload is only bounded by
// its length field. So the cost of framing is per message, and there is no payload-size sweep:
// at t ns per header the framing of an S-byte message costs t/S ns per byte.
//
// Counters, in decimal units (1 M/s = 1e6 per second, 1 GB/s = 1e9 B/s): items_per_second,
// headers per second; bytes_per_second, header bytes (32 per header) per second.
//
// Run (the dev or release preset): strata_bench_transport_frame_bench
//   --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <strata/transport/tcp/frame.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include <benchmark/benchmark.h>

namespace {

namespace tcp = strata::transport::tcp;

// A 1 MiB float all-reduce segment, as link.hpp sends it.
constexpr std::uint32_t kPayloadBytes = 1u << 20;
constexpr std::uint32_t kMaxPayload = 64u << 20;

tcp::FrameHeader data_header() {
  tcp::FrameHeader header;
  header.type = tcp::FrameType::data;
  header.kind = strata::Collective::all_reduce;
  header.element_type = strata::DataType::float32;
  header.op = strata::ReduceOp::sum;
  header.root = 0;
  header.payload_bytes = kPayloadBytes;
  header.sequence = 42;
  header.count = kPayloadBytes / sizeof(float);
  return header;
}

tcp::FrameHeader abort_header() {
  tcp::FrameHeader header;
  header.type = tcp::FrameType::abort;
  header.payload_bytes = 64;
  header.sequence = 42;
  return header;
}

void set_rates(benchmark::State& state) {
  const auto headers = static_cast<double>(state.iterations());
  state.counters["items_per_second"] =
      benchmark::Counter(headers, benchmark::Counter::kIsRate, benchmark::Counter::OneK::kIs1000);
  state.counters["bytes_per_second"] =
      benchmark::Counter(headers * static_cast<double>(tcp::kFrameHeaderBytes),
                         benchmark::Counter::kIsRate, benchmark::Counter::OneK::kIs1000);
}

void BM_FrameEncode(benchmark::State& state) {
  tcp::FrameHeader header = data_header();
  for (auto _ : state) {
    ++header.sequence;
    // The header is opaque to the optimizer: encode() is constexpr and must not be folded.
    benchmark::DoNotOptimize(header);
    tcp::FrameBytes bytes = tcp::encode(header);
    benchmark::DoNotOptimize(bytes);
  }
  set_rates(state);
}
BENCHMARK(BM_FrameEncode);

void BM_FrameDecode(benchmark::State& state) {
  const auto type = static_cast<tcp::FrameType>(state.range(0));
  tcp::FrameBytes bytes =
      tcp::encode(type == tcp::FrameType::data ? data_header() : abort_header());
  tcp::FrameHeader header;
  for (auto _ : state) {
    // The bytes may have changed (a fresh read off the socket): decode() reloads them.
    benchmark::DoNotOptimize(bytes);
    std::error_code error =
        tcp::decode(std::span<const std::byte, tcp::kFrameHeaderBytes>(bytes), header, kMaxPayload);
    benchmark::DoNotOptimize(error);
    benchmark::DoNotOptimize(header);
  }
  if (tcp::decode(std::span<const std::byte, tcp::kFrameHeaderBytes>(bytes), header, kMaxPayload))
    state.SkipWithError("decode rejected a valid header");
  set_rates(state);
}
BENCHMARK(BM_FrameDecode)
    ->ArgName("type")
    ->Arg(static_cast<std::int64_t>(tcp::FrameType::data))
    ->Arg(static_cast<std::int64_t>(tcp::FrameType::abort));

void BM_FrameDecodeRejected(benchmark::State& state) {
  const bool at_last_check = state.range(0) != 0;
  tcp::FrameHeader sent = data_header();
  if (at_last_check) sent.payload_bytes = kMaxPayload + 1;
  tcp::FrameBytes bytes = tcp::encode(sent);
  if (!at_last_check) bytes[0] = std::byte{0};
  const tcp::FrameError expected =
      at_last_check ? tcp::FrameError::payload_too_large : tcp::FrameError::bad_magic;
  tcp::FrameHeader header;
  for (auto _ : state) {
    benchmark::DoNotOptimize(bytes);
    std::error_code error =
        tcp::decode(std::span<const std::byte, tcp::kFrameHeaderBytes>(bytes), header, kMaxPayload);
    benchmark::DoNotOptimize(error);
  }
  if (tcp::decode(std::span<const std::byte, tcp::kFrameHeaderBytes>(bytes), header, kMaxPayload) !=
      tcp::make_error_code(expected))
    state.SkipWithError("decode did not reject the header for the expected reason");
  set_rates(state);
}
BENCHMARK(BM_FrameDecodeRejected)->ArgName("at")->Arg(0)->Arg(1);

void BM_FrameRoundTrip(benchmark::State& state) {
  tcp::FrameHeader sent = data_header();
  tcp::FrameHeader received;
  std::int64_t disagreements = 0;
  for (auto _ : state) {
    ++sent.sequence;
    benchmark::DoNotOptimize(sent);
    tcp::FrameBytes bytes = tcp::encode(sent);
    // What travels is opaque: the receiver cannot see the sender's header.
    benchmark::DoNotOptimize(bytes);
    std::error_code error = tcp::decode(std::span<const std::byte, tcp::kFrameHeaderBytes>(bytes),
                                        received, kMaxPayload);
    // The receiver's own view of the call, as link.hpp checks every data message against it.
    disagreements += static_cast<std::int64_t>(error || received != sent);
    benchmark::DoNotOptimize(disagreements);
  }
  if (disagreements != 0) state.SkipWithError("a header did not survive encode and decode");
  set_rates(state);
}
BENCHMARK(BM_FrameRoundTrip);

}  // namespace
