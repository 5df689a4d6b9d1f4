#pragma once
/// \file
/// LambConfig's policy (kopt/impl/policy.hpp): Adam's moments and a per-param rate. Its
/// update needs two sums over the whole param (of p^2 and of u^2, u the Adam direction with
/// decay), so it is a policy with tensor sums (kopt/impl/tensor_sums.hpp): the engine first
/// runs `measure` over every element (writing nothing), turns each param's sums into its
/// rate with `rate`, and then runs `update` with that rate in the scalars. Both passes
/// compute u by the same function from the same inputs, so the norm is of the very update.

#include <array>
#include <cmath>
#include <kopt/impl/policy.hpp>
#include <kopt/lamb_config.hpp>

namespace kopt {

/// The floats one param's LAMB update needs this step.
struct LambStepScalars {
  float grad_scale;  ///< negated for maximize
  float beta1, grad_coef;
  float beta2, one_minus_beta2;
  float l2_decay;  ///< weight_decay without decoupled, else 0
  float decay;     ///< weight_decay with decoupled, else 0
  float inv_bc1, inv_bc2;
  float eps;
  float rate;  ///< lr r: the engine sets each param's from its sums (lr where r = 1)
  float lr, min_trust, max_trust;
  bool clamp;
};

namespace Impl {

struct LambPolicy {
  using Config = LambConfig;
  using Scalars = LambStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  /// 0: with the trust ratio; 1: r = 1 (no sums needed).
  static constexpr int num_variants = 2;
  static int variant(const Config& c) { return c.adapts() ? 0 : 1; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int) { return 3u; }

  /// Sums per param that `rate` takes: of p^2 and of u^2.
  static constexpr int tensor_sums = 2;
  KOKKOS_INLINE_FUNCTION static constexpr bool measures(int variant) { return variant == 0; }

  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    const double bc1 = c.bias_correction ? 1.0 - std::pow(c.beta1, static_cast<double>(t)) : 1.0;
    const double bc2 = c.bias_correction ? 1.0 - std::pow(c.beta2, static_cast<double>(t)) : 1.0;
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.beta1 = static_cast<float>(c.beta1);
    s.grad_coef = static_cast<float>(c.grad_averaging ? 1.0 - c.beta1 : 1.0);
    s.beta2 = static_cast<float>(c.beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
    s.l2_decay = static_cast<float>(c.decoupled ? 0.0 : c.weight_decay);
    s.decay = static_cast<float>(c.decoupled ? c.weight_decay : 0.0);
    s.inv_bc1 = static_cast<float>(1.0 / bc1);
    s.inv_bc2 = static_cast<float>(1.0 / bc2);
    s.eps = static_cast<float>(c.eps);
    s.lr = s.rate = static_cast<float>(c.lr);
    s.min_trust = static_cast<float>(c.min_trust);
    s.max_trust = static_cast<float>(c.max_trust);
    s.clamp = c.clamp_trust;
    return s;
  }

  /// The direction u of one element, with its moments m and v updated.
  KOKKOS_FORCEINLINE_FUNCTION static float direction(float p, float grad, float& m, float& v,
                                                     const Scalars& s) {
    const float g = grad * s.grad_scale + s.l2_decay * p;
    m = s.beta1 * m + s.grad_coef * g;
    v = s.beta2 * v + s.one_minus_beta2 * (g * g);
    return (m * s.inv_bc1) / (KOPT_SQRT(v * s.inv_bc2) + s.eps) + s.decay * p;
  }

  /// The values whose squares the sums add, for one element; its state is not written.
  KOKKOS_FORCEINLINE_FUNCTION static void measure(float p, float g, float m, float v, float,
                                                  const Scalars& s, float (&x)[tensor_sums]) {
    x[0] = p;
    x[1] = direction(p, g, m, v, s);
  }

  /// lr r for a param whose sums are `sums` (host code): r = ||p|| / ||u||, 1 where either
  /// is 0 (or NaN: the update then carries the NaN, as apex's does), clamped if asked.
  static float rate(const Scalars& s, const double (&sums)[tensor_sums]) {
    const double p_norm = std::sqrt(sums[0]), u_norm = std::sqrt(sums[1]);
    double r = p_norm > 0.0 && u_norm > 0.0 ? p_norm / u_norm : 1.0;
    if (s.clamp) r = std::min(std::max(r, double{s.min_trust}), double{s.max_trust});
    return static_cast<float>(double{s.lr} * r);
  }

  template <int>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& m, float& v, float&,
                                                  const Scalars& s) {
    return p - s.rate * direction(p, grad, m, v, s);
  }
};

}  // namespace Impl
}  // namespace kopt
