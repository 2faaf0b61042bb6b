// strata/optim/momentum.hpp — SGD with (optionally Nesterov) momentum, Keras semantics.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include <strata/optim/optimizer.hpp>
#include <strata/optim/rules.hpp>

namespace strata::optim {

/// Gradient descent with momentum, as Keras' `SGD(learning_rate, momentum, nesterov)`:
///
///     v = momentum * v - learning_rate * g
///     p = p + v                                     (nesterov == false)
///     p = p + momentum * v - learning_rate * g      (nesterov == true, with the new v)
///
/// The velocity `v` starts at zero. This is TensorFlow's formulation, in which the learning
/// rate is folded into the velocity; it differs from PyTorch's `SGD(momentum=...)`
/// (`v = momentum * v + g; p -= lr * v`) when the learning rate changes between steps.
///
/// Slots (`kSlots == 1`): `state.slots[i]` is the velocity of parameter `i`.
///
/// Precision: hyperparameters are rounded to `T` once per call; all arithmetic is in `T`.
/// Determinism: element-wise, no reductions: the same inputs give the same bits on every
/// replica built with the same compiler flags (`-ffp-contract`/FMA may change the last bit
/// between builds).
///
/// Example:
///
///     strata::optim::Momentum opt{.learning_rate = 0.1, .momentum = 0.9, .nesterov = true};
///     auto state = strata::optim::make_state<float>(opt, weights.size());
///     opt.apply(std::span(weights), std::span(grads), state);
struct Momentum {
  static constexpr std::size_t kSlots = 1;

  double learning_rate = 0.01;  ///< Keras' default
  double momentum = 0.9;        ///< in [0, 1]
  bool nesterov = false;

  /// Applies one update to `params` in place and advances the velocity in `state`.
  ///
  /// @param params the parameters, updated in place.
  /// @param grads  the gradient of the loss with respect to `params` (same length); must not
  ///               overlap `params` or `state.slots`.
  /// @param state  made by `make_state<T>(*this, params.size())`; its `step` is incremented.
  /// @throws UsageError ("optim::Momentum::apply") if the sizes of `params`, `grads` and
  ///         `state.slots` disagree, `learning_rate` is negative or not finite, or `momentum`
  ///         is outside [0, 1]; nothing is modified then. Cost: one pass over the buffers.
  template <std::floating_point T>
  void apply(std::span<T> params, std::span<const std::type_identity_t<T>> grads,
             OptimizerState<T>& state) const {
    visit_rule<T>(state.step, [&](const auto& rule) {
      detail::check_apply_sizes("optim::Momentum::apply", kSlots, params.size(), grads.size(),
                                state);
      detail::apply_rule(rule, params.data(), grads.data(), state.slots.data(), params.size());
    });
    ++state.step;
  }

  /// Calls `f(rule)` with the per-element rule (optim/rules.hpp) of the update that follows
  /// `step` updates: what `apply` runs on the host and strata's kernels on a GPU.
  /// @throws UsageError for an invalid hyperparameter, as `apply`.
  template <std::floating_point T, class F>
  void visit_rule(std::int64_t step, F&& f) const {
    (void)step;
    constexpr std::string_view kOperation = "optim::Momentum::apply";
    detail::check_learning_rate(kOperation, learning_rate);
    detail::check_unit_interval(kOperation, "momentum", momentum, /*one_allowed=*/true);
    const T lr = static_cast<T>(learning_rate);
    const T mu = static_cast<T>(momentum);
    // Two rules rather than a test per element, so that each loop vectorizes.
    if (nesterov)
      f(NesterovMomentumRule<T>{lr, mu});
    else
      f(MomentumRule<T>{lr, mu});
  }
};

}  // namespace strata::optim
