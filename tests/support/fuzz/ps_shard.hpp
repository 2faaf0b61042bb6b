// tests/support/fuzz/ps_shard.hpp — the parameter-server fuzz target: what a server does with
// the bytes of push prefixes and create specs from a hostile or broken worker.
//
// One function shared by the libFuzzer entry point (tests/fuzz/ps_shard_fuzz.cpp) and the
// bounded random-input test every build runs (tests/ps/shard_random_test.cpp). The input is a
// program: a first byte sizes a shard (1 to 8 elements, float), then each chunk of
// kSyncSpecBytes + kOptimizerSpecBytes + 1 bytes is one step: a SyncSpec and an OptimizerSpec
// as they come off the wire, then a byte saying which caller pushes (or, with the high bit, that
// a worker finished). It calls std::abort() — a crash to libFuzzer, a failed test to ctest —
// when:
//   - a decoder accepts bytes that do not encode back to themselves, or accepts a spec that
//     breaks the protocol's rules (a replica out of range, a synchronous step that aggregates
//     nothing or more gradients than there are replicas);
//   - a push lets the shard's version go down, leaves a caller waiting twice, releases a caller
//     that was not waiting, or leaves a synchronous step with more arrivals than its bound;
//   - a push outcome is an error without a reason;
//   - assign_state (a step whose byte has bit 0x40 set, its state spec in the optimizer bytes)
//     keeps a state other than the one sent, or slots that do not fit the shard.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/ps/detail/shard.hpp>
#include <strata/ps/protocol.hpp>

namespace strata::testing {

namespace fuzz_detail {

[[noreturn]] inline void ps_shard_failure(std::string_view what) {
  std::fprintf(stderr, "fuzz_ps_shard: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline void require(bool condition, std::string_view what) {
  if (!condition) ps_shard_failure(what);
}

// The bytes of a decoded spec must be exactly what it encodes to: nothing the decoder ignored.
template <std::size_t N, class Spec>
void check_round_trip(std::span<const std::byte> in, const Spec& spec) {
  const std::array<std::byte, N> again = ps::encode(spec);
  require(std::equal(again.begin(), again.end(), in.begin()),
          "an accepted spec does not encode back to the same bytes");
}

}  // namespace fuzz_detail

inline void fuzz_ps_shard(std::span<const std::uint8_t> data) {
  using fuzz_detail::require;
  namespace detail = strata::ps::detail;
  if (data.empty()) return;
  const auto bytes = std::as_bytes(data);

  // The create spec decoder sees the whole input too.
  if (const auto create = ps::decode_create(bytes)) {
    fuzz_detail::check_round_trip<ps::kCreateSpecBytes>(bytes, *create);
    require(create->name_bytes >= 1 && create->name_bytes <= ps::kMaxNameBytes,
            "a create spec with a name length out of range was accepted");
  }

  // So does the state spec decoder (assign_state's, pull_state's reply).
  if (const auto state = ps::decode_state(bytes)) {
    fuzz_detail::check_round_trip<ps::kStateSpecBytes>(bytes, *state);
    require(state->slots_per_element <= ps::kMaxSlotsPerElement && state->step >= 0 &&
                (state->present || (state->slots_per_element == 0 && state->step == 0)),
            "a state spec out of range was accepted");
  }

  // And the attach spec decoder (attach_region's).
  if (const auto attach = ps::decode_attach(bytes)) {
    fuzz_detail::check_round_trip<ps::kAttachSpecBytes>(bytes, *attach);
    const bool collect = attach->phase == ps::AttachSpec::Phase::collect;
    require(collect ? attach->bytes >= 1 && attach->bytes <= ps::kMaxRegionBytes
                    : attach->bytes == 0 && attach->ticket == decltype(attach->ticket){},
            "an attach spec out of range was accepted");
  }

  const std::size_t elements = 1 + static_cast<std::size_t>(data[0] % 8);
  detail::Shard shard;
  shard.name = "fuzzed";
  shard.elements = elements;
  shard.update = (data[0] & 0x80) != 0 ? ps::UpdateRule::sum : ps::UpdateRule::optimizer;
  shard.data = detail::Values<float>{std::vector<float>(elements, 0.0f), {}, {}, {}};
  auto& values = std::get<detail::Values<float>>(shard.data);

  // Callers are the addresses of these slots (a server's sessions).
  std::array<int, 8> callers{};
  std::multiset<const void*> waiting;
  constexpr std::size_t kStep = ps::kSyncSpecBytes + ps::kOptimizerSpecBytes + 1;
  for (std::size_t at = 1; at + kStep <= bytes.size(); at += kStep) {
    const auto sync_bytes = bytes.subspan(at, ps::kSyncSpecBytes);
    const auto optimizer_bytes = bytes.subspan(at + ps::kSyncSpecBytes, ps::kOptimizerSpecBytes);
    const auto who = static_cast<std::uint8_t>(bytes[at + kStep - 1]);
    void* caller = &callers[who % callers.size()];

    if ((who & 0x80) != 0) {  // a worker finished
      for (void* released : detail::finished(shard, who & 0x7F)) {
        const auto it = waiting.find(released);
        require(it != waiting.end(), "finished released a caller that was not waiting");
        waiting.erase(it);
      }
      continue;
    }
    const auto sync = ps::decode_sync(sync_bytes);
    const auto optimizer = ps::decode_optimizer(optimizer_bytes);
    if (sync) {
      fuzz_detail::check_round_trip<ps::kSyncSpecBytes>(sync_bytes, *sync);
      require(sync->replicas >= 1 && sync->replica < sync->replicas,
              "a sync spec with a replica out of range was accepted");
      require(sync->mode != ps::SyncSpec::Mode::synchronous ||
                  (sync->bound >= 1 && sync->bound <= sync->replicas),
              "a synchronous spec that aggregates nothing or too much was accepted");
    }
    if (optimizer)
      fuzz_detail::check_round_trip<ps::kOptimizerSpecBytes>(optimizer_bytes, *optimizer);
    if ((who & 0x40) != 0) {  // an assign_state: the optimizer bytes as a state spec
      const auto state = ps::decode_state(optimizer_bytes);
      if (!state) continue;
      // Slots of the spec's size, or (low bit set) one value too many.
      std::vector<float> slots(state->slots_per_element * elements + (who & 0x01), 0.25f);
      const std::string why = detail::assign_state(shard, values, *state, slots);
      if (!why.empty()) continue;
      require(detail::state_of(values) == *state, "assign_state kept another state than sent");
      require(values.state.slots.size() == state->slots_per_element * elements,
              "assign_state left slots that do not fit the shard");
      continue;
    }
    // Keep the shard small: a fuzzed spec may name a million replicas.
    if (!sync || !optimizer || sync->replicas > 64) continue;
    if (waiting.count(caller) != 0) continue;  // a connection waits for its reply before it pushes

    std::vector<float> gradient(elements);
    for (std::size_t i = 0; i < elements; ++i)
      gradient[i] =
          static_cast<float>(
              static_cast<int>(static_cast<std::uint8_t>(sync_bytes[i % sync_bytes.size()])) -
              128) /
          16.0f;
    const std::uint64_t version = shard.version;
    const auto outcome =
        detail::push(shard, values, *optimizer, *sync, gradient, who & 0x0F, caller);
    require(shard.version >= version, "a push made the shard's version go down");
    for (void* released : outcome.released) {
      const auto it = waiting.find(released);
      require(it != waiting.end(), "a push released a caller that was not waiting");
      waiting.erase(it);
    }
    switch (outcome.kind) {
      case detail::PushOutcome::Kind::error:
        require(!outcome.why.empty(), "an error without a reason");
        break;
      case detail::PushOutcome::Kind::wait:
        waiting.insert(caller);
        break;
      case detail::PushOutcome::Kind::reply:
        break;
    }
    require(waiting.size() == shard.sync.waiting.size(),
            "the shard's waiting callers differ from the ones told to wait");
    require(shard.sync.arrivals <= shard.sync.spec.bound ||
                shard.sync.spec.mode != ps::SyncSpec::Mode::synchronous,
            "a synchronous step holds more gradients than it aggregates");
  }
  // A caller that goes away waits for nothing.
  for (auto& slot : callers)
    detail::forget(shard, &slot);
  require(shard.sync.waiting.empty(), "forget left a caller waiting");
}

}  // namespace strata::testing
