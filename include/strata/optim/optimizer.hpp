// strata/optim/optimizer.hpp — the Optimizer concept and the state every optimizer keeps.
//
// Optimizers apply one update to a span of the caller's parameters from a span of gradients
// of the same length. They own no buffers and know no tensor type: the per-parameter
// accumulators an optimizer needs (momentum, Adam's moments) live in an `OptimizerState`
// that the caller keeps next to each copy of the parameters. A Mirrored replica keeps one
// state per replica and every replica applies the same update; CentralStorage keeps one
// state next to the host copy; a parameter server keeps one per shard.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include <strata/core/error.hpp>

namespace strata::optim {

/// What an optimizer remembers between updates of one parameter buffer of `n` elements.
///
/// - `slots`: `O::kSlots` arrays of `n` elements laid out back to back (slot `k` of element
///   `i` is `slots[k * n + i]`), zero at the start as in Keras. Which slot means what is
///   documented by each optimizer (`Momentum`: velocity; `Adam`: m, then v).
/// - `step`: the number of updates applied so far (Adam's `t` is `step + 1` during an update).
///
/// A plain aggregate so that checkpoints and parameter servers can save, send and restore it
/// as they like. Make one with `make_state`.
template <std::floating_point T>
struct OptimizerState {
  std::vector<T> slots;
  std::int64_t step = 0;
};

/// O models Optimizer<T> if:
///
/// 1. `O::kSlots` is a constant expression of type `std::size_t`: the number of arrays of
///    `n` elements the optimizer keeps per parameter. Being a compile-time constant lets
///    callers size `OptimizerState` (and checkpoint layouts, and a parameter server's memory)
///    from the type alone, before any update runs.
/// 2. `o.apply(params, grads, state)` is valid for a *const* `O` `o`, `std::span<T> params`,
///    `std::span<const T> grads` and `OptimizerState<T>& state`: it applies one update in
///    place. Const because hyperparameters are configuration, not state: Mirrored replicas
///    share one optimizer object across threads, so everything that changes per update must
///    live in `state`, which each replica owns.
///
/// Semantic requirements (not checkable by the compiler): `apply` reads `grads` and writes
/// only `params` and `state`, whose `slots` hold `kSlots` arrays of `params.size()` elements
/// back to back (so checkpoints can store them without knowing the optimizer); it is
/// element-wise, so the result for an element does not depend on the span's length or on
/// other elements (that is what lets the same update be applied to a whole buffer, to fusion
/// buckets, or to a parameter server's shard of it); and it is deterministic (same inputs,
/// same bits), so synchronous replicas stay identical.
///
/// Left out: learning-rate schedules (change `learning_rate` between steps), weight decay
/// and gradient clipping (apply them to `grads` first), and sparse updates.
template <class O, class T>
concept Optimizer = std::floating_point<T> &&
    std::same_as<decltype(O::kSlots), const std::size_t> &&
    requires(const O& o, std::span<T> params, std::span<const T> grads, OptimizerState<T>& state) {
  typename std::integral_constant<std::size_t, O::kSlots>;  // a constant expression
  o.apply(params, grads, state);
};

/// A fresh state for `n` parameters: `O::kSlots * n` zeros and `step == 0`.
///
/// `T` comes first so that it is the only argument to spell: `make_state<float>(adam, n)`.
/// @throws UsageError if `O::kSlots * n` overflows `std::size_t`.
template <std::floating_point T, Optimizer<T> O>
OptimizerState<T> make_state(const O& /*optimizer*/, std::size_t n) {
  // Constexpr, so that an optimizer without slots never spells a division by zero.
  if constexpr (O::kSlots != 0)
    if (n > std::numeric_limits<std::size_t>::max() / O::kSlots)
      throw UsageError(-1, "optim::make_state",
                       fmt::format("{} slots of {} elements overflow std::size_t", O::kSlots, n),
                       "pass the number of elements of the parameter buffer");
  return OptimizerState<T>{std::vector<T>(O::kSlots * n, T(0)), 0};
}

namespace detail {

// The checks every apply() makes before touching memory. `operation` is "optim::Adam::apply".
template <std::floating_point T>
void check_apply_sizes(std::string_view operation, std::size_t slots_per_element,
                       std::size_t params, std::size_t grads, const OptimizerState<T>& state) {
  if (params != grads)
    throw UsageError(-1, operation,
                     fmt::format("params has {} elements but grads has {}", params, grads),
                     "pass one gradient per parameter, in the same order");
  if (state.slots.size() != slots_per_element * params)
    throw UsageError(
        -1, operation,
        fmt::format("state has {} slot values but {} parameters need {} x {} = {}",
                    state.slots.size(), params, slots_per_element, params,
                    slots_per_element * params),
        "create the state with make_state<T>(optimizer, params.size()) for these parameters");
  if (state.step < 0 || state.step == std::numeric_limits<std::int64_t>::max())
    throw UsageError(-1, operation, fmt::format("state.step is {}", state.step),
                     "state.step counts the updates applied: start it at 0 and leave it to apply");
}

// Hyperparameters are plain fields, so they are checked on every apply(): a NaN learning rate
// would otherwise silently turn every parameter into NaN.
inline void check_hyperparameter(std::string_view operation, std::string_view name, double value,
                                 bool valid, std::string_view requirement) {
  if (!valid)
    throw UsageError(-1, operation,
                     fmt::format("{} is {}, but it must be {}", name, value, requirement),
                     fmt::format("fix the {} field of the optimizer", name));
}

inline void check_learning_rate(std::string_view operation, double learning_rate) {
  check_hyperparameter(operation, "learning_rate", learning_rate,
                       std::isfinite(learning_rate) && learning_rate >= 0.0, "finite and >= 0");
}

// A factor in [0, 1) (Adam's betas) or [0, 1] (momentum).
inline void check_unit_interval(std::string_view operation, std::string_view name, double value,
                                bool one_allowed) {
  const bool valid =
      std::isfinite(value) && value >= 0.0 && (one_allowed ? value <= 1.0 : value < 1.0);
  check_hyperparameter(operation, name, value, valid, one_allowed ? "in [0, 1]" : "in [0, 1)");
}

}  // namespace detail

}  // namespace strata::optim
