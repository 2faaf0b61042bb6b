// strata/optim/rules.hpp — the per-element arithmetic of each optimizer, as small structs of
// coefficients that host loops and CUDA kernels both run, so that an update gives the same
// bits on the CPU and on a GPU (the kernels are compiled without FMA contraction).
//
// A rule is computed once per update by its optimizer (`visit_rule`), which checks the
// hyperparameters; `rule(p, g, slots, n, i)` then updates element `i` of `n` parameters, with
// slot `k` of element `i` at `slots[k * n + i]` (OptimizerState's layout).
//
// This header includes nothing that a CUDA compiler cannot parse: the kernels include it.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::optim {

namespace detail {

template <class T>
STRATA_HOST_DEVICE inline T square_root(T x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);  // CUDA's overloads for float and double, correctly rounded by default
#else
  return std::sqrt(x);
#endif
}

}  // namespace detail

/// Plain SGD: p -= learning_rate · g.
template <class T>
struct SgdRule {
  static constexpr std::size_t kSlots = 0;
  T learning_rate;

  STRATA_HOST_DEVICE void operator()(T* p, const T* g, T* /*slots*/, std::size_t /*n*/,
                                     std::size_t i) const {
    p[i] -= learning_rate * g[i];
  }
};

/// Momentum (Keras): v = momentum · v − learning_rate · g;  p += v.
template <class T>
struct MomentumRule {
  static constexpr std::size_t kSlots = 1;
  T learning_rate;
  T momentum;

  STRATA_HOST_DEVICE void operator()(T* p, const T* g, T* slots, std::size_t /*n*/,
                                     std::size_t i) const {
    T& v = slots[i];
    v = momentum * v - learning_rate * g[i];
    p[i] += v;
  }
};

/// Nesterov momentum (Keras): v = momentum · v − learning_rate · g;
/// p += momentum · v − learning_rate · g.
template <class T>
struct NesterovMomentumRule {
  static constexpr std::size_t kSlots = 1;
  T learning_rate;
  T momentum;

  STRATA_HOST_DEVICE void operator()(T* p, const T* g, T* slots, std::size_t /*n*/,
                                     std::size_t i) const {
    T& v = slots[i];
    const T step = learning_rate * g[i];
    v = momentum * v - step;
    p[i] += momentum * v - step;
  }
};

/// Adam (Keras), with the bias correction folded into `step_size` (see optim/adam.hpp):
/// m += (g − m)(1 − β1);  v += (g² − v)(1 − β2);  p −= step_size · m / (√v + ε).
template <class T>
struct AdamRule {
  static constexpr std::size_t kSlots = 2;
  T step_size;
  T one_minus_beta1;
  T one_minus_beta2;
  T epsilon;

  STRATA_HOST_DEVICE void operator()(T* p, const T* g, T* slots, std::size_t n,
                                     std::size_t i) const {
    T& m = slots[i];
    T& v = slots[n + i];
    m += (g[i] - m) * one_minus_beta1;
    v += (g[i] * g[i] - v) * one_minus_beta2;
    p[i] -= step_size * m / (detail::square_root(v) + epsilon);
  }
};

namespace detail {

/// Runs `rule` over `n` elements on the host.
template <class Rule, class T>
void apply_rule(const Rule& rule, T* params, const T* grads, T* slots, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    rule(params, grads, slots, n, i);
}

}  // namespace detail

}  // namespace strata::optim
