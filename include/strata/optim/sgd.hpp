// strata/optim/sgd.hpp — plain stochastic gradient descent.
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

/// Stochastic gradient descent: `p -= learning_rate * g`, element by element.
///
/// Same update as Keras' `SGD(learning_rate)` with `momentum=0`. Keeps no slots (`kSlots ==
/// 0`); `state.step` still counts the updates applied.
///
/// Precision: `learning_rate` is rounded to `T` once per call and all arithmetic is in `T`.
/// Determinism: element-wise, no reductions: the same inputs give the same bits on every
/// replica built with the same compiler flags (`-ffp-contract`/FMA may change the last bit
/// between builds).
///
/// Example:
///
///     strata::optim::Sgd sgd{.learning_rate = 0.1};
///     auto state = strata::optim::make_state<float>(sgd, weights.size());
///     sgd.apply(std::span(weights), std::span(grads), state);
struct Sgd {
  static constexpr std::size_t kSlots = 0;

  double learning_rate = 0.01;  ///< Keras' default

  /// Applies one update to `params` in place.
  ///
  /// @param params the parameters, updated in place.
  /// @param grads  the gradient of the loss with respect to `params` (same length); must not
  ///               overlap `params`.
  /// @param state  made by `make_state<T>(*this, params.size())`; its `step` is incremented.
  /// @throws UsageError ("optim::Sgd::apply") if the sizes of `params`, `grads` and
  ///         `state.slots` disagree or `learning_rate` is negative or not finite; nothing is
  ///         modified then. Cost: one pass over `params` and `grads`.
  template <std::floating_point T>
  void apply(std::span<T> params, std::span<const std::type_identity_t<T>> grads,
             OptimizerState<T>& state) const {
    visit_rule<T>(state.step, [&](const auto& rule) {
      detail::check_apply_sizes("optim::Sgd::apply", kSlots, params.size(), grads.size(), state);
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
    detail::check_learning_rate("optim::Sgd::apply", learning_rate);
    f(SgdRule<T>{static_cast<T>(learning_rate)});
  }
};

}  // namespace strata::optim
