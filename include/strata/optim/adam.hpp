// strata/optim/adam.hpp — Adam (Kingma & Ba, 2015) in Keras' formulation.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include <strata/optim/optimizer.hpp>
#include <strata/optim/rules.hpp>

namespace strata::optim {

/// Adam, as Keras' `Adam(learning_rate, beta_1, beta_2, epsilon)` with `amsgrad=False`.
/// For update number `t = state.step + 1`:
///
///     lr_t = learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t)
///     m    = beta1 * m + (1 - beta1) * g        (computed as m += (g - m) * (1 - beta1))
///     v    = beta2 * v + (1 - beta2) * g^2      (computed as v += (g^2 - v) * (1 - beta2))
///     p    = p - lr_t * m / (sqrt(v) + epsilon)
///
/// This is the paper's Algorithm 1 with the bias correction folded into the step size, so
/// `epsilon` is added to `sqrt(v)` and not to the bias-corrected `sqrt(v_hat)`; the defaults
/// are Keras' (`epsilon = 1e-7`; PyTorch uses 1e-8 and the other placement).
///
/// Slots (`kSlots == 2`): `state.slots[i]` is the first moment `m` of parameter `i`,
/// `state.slots[n + i]` the second moment `v`, both starting at zero.
///
/// Precision: `lr_t` and `1 - beta` are computed in double once per call and rounded to `T`;
/// the per-element arithmetic is in `T`.
/// Determinism: element-wise, no reductions: the same inputs give the same bits on every
/// replica built with the same compiler flags (`-ffp-contract`/FMA may change the last bit
/// between builds). The element loop vectorizes when `std::sqrt` may (`-fno-math-errno`).
///
/// Example:
///
///     strata::optim::Adam adam{.learning_rate = 3e-4};
///     auto state = strata::optim::make_state<float>(adam, weights.size());
///     adam.apply(std::span(weights), std::span(grads), state);
struct Adam {
  static constexpr std::size_t kSlots = 2;

  double learning_rate = 0.001;
  double beta1 = 0.9;     ///< decay of the first moment, in [0, 1)
  double beta2 = 0.999;   ///< decay of the second moment, in [0, 1)
  double epsilon = 1e-7;  ///< finite and >= 0; 0 turns an all-zero gradient history into NaN

  /// Applies one update to `params` in place and advances the moments in `state`.
  ///
  /// @param params the parameters, updated in place.
  /// @param grads  the gradient of the loss with respect to `params` (same length); must not
  ///               overlap `params` or `state.slots`.
  /// @param state  made by `make_state<T>(*this, params.size())`; its `step` is incremented.
  /// @throws UsageError ("optim::Adam::apply") if the sizes of `params`, `grads` and
  ///         `state.slots` disagree, `learning_rate` or `epsilon` is negative or not finite,
  ///         or a beta is outside [0, 1); nothing is modified then. Cost: one pass over the
  ///         buffers and two `std::pow` per call.
  template <std::floating_point T>
  void apply(std::span<T> params, std::span<const std::type_identity_t<T>> grads,
             OptimizerState<T>& state) const {
    visit_rule<T>(state.step, [&](const auto& rule) {
      detail::check_apply_sizes("optim::Adam::apply", kSlots, params.size(), grads.size(), state);
      detail::apply_rule(rule, params.data(), grads.data(), state.slots.data(), params.size());
    });
    ++state.step;
  }

  /// Calls `f(rule)` with the per-element rule (optim/rules.hpp) of the update that follows
  /// `step` updates: what `apply` runs on the host and strata's kernels on a GPU.
  /// @throws UsageError for an invalid hyperparameter, as `apply`.
  template <std::floating_point T, class F>
  void visit_rule(std::int64_t step, F&& f) const {
    constexpr std::string_view kOperation = "optim::Adam::apply";
    detail::check_learning_rate(kOperation, learning_rate);
    detail::check_unit_interval(kOperation, "beta1", beta1, /*one_allowed=*/false);
    detail::check_unit_interval(kOperation, "beta2", beta2, /*one_allowed=*/false);
    detail::check_hyperparameter(kOperation, "epsilon", epsilon,
                                 std::isfinite(epsilon) && epsilon >= 0.0, "finite and >= 0");
    const double t = static_cast<double>(step) + 1.0;  // step + 1 overflows at the largest step
    const double bias1 = 1.0 - std::pow(beta1, t);     // > 0 because beta1 < 1 and t >= 1
    const double bias2 = 1.0 - std::pow(beta2, t);
    f(AdamRule<T>{static_cast<T>(learning_rate * std::sqrt(bias2) / bias1),
                  static_cast<T>(1.0 - beta1), static_cast<T>(1.0 - beta2),
                  static_cast<T>(epsilon)});
  }
};

}  // namespace strata::optim
