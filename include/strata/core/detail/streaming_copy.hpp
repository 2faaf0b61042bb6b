// strata/core/detail/streaming_copy.hpp — copies into or out of gradient buckets of megabytes,
// with streaming stores where the destination is large.
//
// A bucket's bytes leave the cache before anyone reads them (the transfer reads a bucket after
// the whole of it is filled; the optimizer reads a gradient after every bucket is copied out), so
// a plain store's read of each line, only to overwrite it, is a third of the copy's memory
// traffic for nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <strata/core/detail/reduce_isa.hpp>

#if STRATA_REDUCE_DISPATCH
#include <immintrin.h>
#endif

namespace strata::detail {

/// Outputs at least this large are written with streaming stores (see the file comment).
inline constexpr std::size_t kStreamingBytes = std::size_t{64} << 10;

#if STRATA_REDUCE_DISPATCH
[[gnu::target("avx2"), gnu::noinline]] inline void streaming_copy_avx2(
    std::byte* __restrict out, const std::byte* __restrict in, std::size_t bytes) noexcept {
  // Bytes copied plainly until `out` is aligned as a streaming store needs.
  const std::size_t head =
      std::min(bytes, (32 - reinterpret_cast<std::uintptr_t>(out) % 32) % std::size_t{32});
  std::memcpy(out, in, head);
  std::size_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i + 96), d);
  }
  _mm_sfence();
  std::memcpy(out + i, in + i, bytes - i);
}
#endif

/// memcpy(out, in, bytes) for buffers that do not overlap; streaming stores from
/// kStreamingBytes where the CPU has AVX2.
inline void streaming_copy(void* __restrict out, const void* __restrict in,
                           std::size_t bytes) noexcept {
  if (bytes == 0) return;
#if STRATA_REDUCE_DISPATCH
  if (bytes >= kStreamingBytes && best_isa() != Isa::baseline)
    return streaming_copy_avx2(static_cast<std::byte*>(out), static_cast<const std::byte*>(in),
                               bytes);
#endif
  std::memcpy(out, in, bytes);
}

}  // namespace strata::detail
