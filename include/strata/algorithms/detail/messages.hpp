// strata/algorithms/detail/messages.hpp — shared pieces of the message-passing algorithms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include <strata/algorithms/link.hpp>
#include <strata/core/collective.hpp>
#include <strata/core/data_type.hpp>
#include <strata/core/reduce_kernels.hpp>
#include <strata/core/reduce_op.hpp>
#include <strata/transport/plan.hpp>

namespace strata::algorithms::detail {

inline void copy_if_distinct(std::byte* to, const std::byte* from, std::size_t bytes) noexcept {
  if (to != from && bytes > 0) std::memmove(to, from, bytes);
}

/// What every message algorithm starts from: the group's shape and this rank's buffers.
struct Participant {
  int size;
  int rank;
  std::size_t element;  ///< bytes per element
  const std::byte* in;
  std::byte* out;

  template <MessageLink Link>
  Participant(const Link& link, const CollectiveCall& call) noexcept
      : size(link.size()),
        rank(link.rank()),
        element(size_of(call.type)),
        in(static_cast<const std::byte*>(call.send)),
        out(static_cast<std::byte*>(call.recv)) {}

  /// With one rank there is nothing to exchange: copies the input's `bytes` to the output and
  /// says so.
  bool alone(std::size_t bytes) const noexcept {
    if (size != 1) return false;
    copy_if_distinct(out, in, bytes);
    return true;
  }
};

/// Element range [begin, end).
struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const noexcept { return end - begin; }
};

/// Part `k` of `parts` nearly equal parts of `range`.
inline Range part_of(Range range, std::size_t parts, std::size_t k) noexcept {
  const std::size_t n = range.size();
  return {range.begin + n * k / parts, range.begin + n * (k + 1) / parts};
}

/// How many messages a range of `elements` is cut into so that none exceeds the link's limit
/// (at least one: every step carries the call's description, even without data).
inline std::size_t segments_for(std::size_t elements, std::size_t element_bytes,
                                std::size_t chunk_bytes) noexcept {
  const std::size_t per_message = std::max<std::size_t>(1, chunk_bytes / element_bytes);
  return std::max<std::size_t>(1, (elements + per_message - 1) / per_message);
}

/// The order of a pipelined ring's messages: `steps` steps of `segments` segments each, where
/// segment k of step t forwards what segment k of step t-1 brought. Step by step, a segment
/// would be forwarded a whole step after it arrived, long out of cache for large buffers; here
/// segment k of step t comes right after segment k + kLag of step t-1 (a wavefront), so it
/// leaves while what produced it is still in cache. Every rank orders its sends and its
/// receives alike, so the messages between two ranks match, and a message only waits for
/// messages earlier in the order: no rank can wait on another in a cycle.
class Wavefront {
 public:
  /// Segments of slack between arriving and forwarding: enough that a rank seldom waits for
  /// its predecessor, few enough (a few MiB at the default segment size) to stay in cache.
  static constexpr std::size_t kLag = 4;

  Wavefront(std::size_t steps, std::size_t segments)
      : segments_(segments),
        step_(steps * segments),
        segment_(steps * segments),
        position_(steps * segments) {
    std::size_t next = 0;
    for (std::size_t front = 0; next < step_.size(); ++front)
      for (std::size_t t = 0; t < steps && t * kLag <= front; ++t) {
        const std::size_t k = front - t * kLag;
        if (k >= segments) continue;
        step_[next] = t;
        segment_[next] = k;
        position_[t * segments + k] = next++;
      }
  }

  std::size_t size() const noexcept { return step_.size(); }
  /// Step and segment of the message at plan index i.
  std::size_t step(std::size_t i) const noexcept { return step_[i]; }
  std::size_t segment(std::size_t i) const noexcept { return segment_[i]; }
  /// Plan index of segment k of step t.
  std::size_t position(std::size_t t, std::size_t k) const noexcept {
    return position_[t * segments_ + k];
  }
  /// What the message at plan index i waits for: the receive it forwards (-1 in step 0).
  std::ptrdiff_t forwards(std::size_t i) const noexcept {
    return step_[i] == 0 ? -1 : static_cast<std::ptrdiff_t>(position(step_[i] - 1, segment_[i]));
  }

 private:
  std::size_t segments_;
  std::vector<std::size_t> step_;
  std::vector<std::size_t> segment_;
  std::vector<std::size_t> position_;
};

inline int mod(int value, int n) noexcept {
  return ((value % n) + n) % n;
}

/// out = first op second over `count` elements of the call's type (mean combines as sum; see
/// finish_mean).
inline void combine(const CollectiveCall& call, std::byte* out, const std::byte* first,
                    const std::byte* second, std::size_t count) {
  if (count == 0) return;
  const void* inputs[2] = {first, second};
  kernels_of(call).reduce_n(out, inputs, 2, count,
                            call.op == ReduceOp::mean ? ReduceOp::sum : call.op);
}

/// Divides a finished sum by the group size when the call's op is mean.
inline void finish_mean(const CollectiveCall& call, std::byte* data, std::size_t count,
                        int group_size) {
  if (call.op != ReduceOp::mean || count == 0) return;
  kernels_of(call).divide(data, count, static_cast<std::size_t>(group_size));
}

/// Combines two ranks' partials of `count` elements into `out`, the lower rank's first, so
/// that both partners of an exchange compute the same bits; `last`: the final combine, where a
/// mean is finished.
inline void combine_partials(const CollectiveCall& call, std::byte* out, const std::byte* own,
                             const std::byte* received, bool received_first, std::size_t count,
                             bool last, int group_size) {
  if (received_first)
    combine(call, out, received, own, count);
  else
    combine(call, out, own, received, count);
  if (last) finish_mean(call, out, count, group_size);
}

/// How recursive doubling and halving-doubling run on any group size: p, the largest power of
/// two ≤ n, ranks take part in the exchange; for r < 2e (e = n - p) even rank r first hands its
/// vector to r+1 and waits for the result. The p remaining ranks get virtual ranks 0..p-1.
struct PowerOfTwoFold {
  int p = 1;                 ///< ranks in the exchange
  int rounds = 0;            ///< log2(p)
  int extra = 0;             ///< e = n - p, the ranks folded away
  bool folded_away = false;  ///< an even rank r < 2e: hands its vector to r+1
  bool folds_in = false;     ///< an odd rank r < 2e: combines r-1's vector with its own
  int virtual_rank = 0;      ///< this rank's place in the exchange (unless folded away)

  explicit PowerOfTwoFold(const Participant& self) noexcept {
    while (p * 2 <= self.size) {
      p *= 2;
      ++rounds;
    }
    extra = self.size - p;
    folded_away = self.rank < 2 * extra && self.rank % 2 == 0;
    folds_in = self.rank < 2 * extra && self.rank % 2 == 1;
    virtual_rank = folds_in ? self.rank / 2 : self.rank - extra;
  }

  /// The rank that has virtual rank `v`.
  int real_rank(int v) const noexcept { return v < extra ? 2 * v + 1 : v + extra; }
};

/// The part of a rank folded out of a power-of-two exchange (recursive doubling and halving):
/// send every part of `in` to `partner`, receive the result into `out`. In place the result
/// overwrites what send k read, so receive k waits for it.
template <MessageLink Link>
void fold_away(Link& link, int partner, const std::byte* in, std::byte* out,
               std::span<const Range> parts, std::size_t element) {
  std::vector<transport::SendStep> sends;
  std::vector<transport::RecvStep> recvs;
  for (const Range& part : parts)
    sends.push_back({partner, in + part.begin * element, part.size() * element, -1});
  for (std::size_t k = 0; k < parts.size(); ++k)
    recvs.push_back({partner, out + parts[k].begin * element, parts[k].size() * element,
                     out == in ? static_cast<std::ptrdiff_t>(k) : -1});
  link.transfer(sends, recvs, [](std::size_t) {});
}

}  // namespace strata::algorithms::detail
