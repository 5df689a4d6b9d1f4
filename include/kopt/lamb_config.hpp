#pragma once
/// \file
/// kopt::LambConfig: LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning"),
/// Adam's moments with a layer-wise trust ratio, as apex's FusedLAMB and DeepSpeed's Lamb.

#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct LambPolicy;  // kopt/impl/policies/lamb.hpp
}

/// LAMB's hyperparameters with apex FusedLAMB's defaults. For each param, with g its
/// gradient times the step's grad_scale (negated if `maximize`) and t its step count:
///   g <- g + weight_decay p                       (decoupled = false only: an L2 term)
///   m <- beta1 m + c g        (c = 1 - beta1 with grad_averaging, else 1)
///   v <- beta2 v + (1 - beta2) g^2
///   u  = (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay p     (decay term: decoupled only)
///   r  = ||p|| / ||u|| over the whole param (1 where either norm is 0), clamped to
///        [min_trust, max_trust] when clamp_trust (DeepSpeed's min_coeff / max_coeff)
///   p <- p - lr r u
/// with bc1 = 1 - beta1^t and bc2 = 1 - beta2^t (1 without bias_correction). Where
/// trust_ratio is false, or weight_decay is 0 and always_adapt false (apex: use_nvlamb), r
/// is 1: the update is Adam's. Give biases and norms a group with trust_ratio = false to
/// exclude them. apex also clips the global grad norm inside FusedLAMB (max_grad_norm);
/// kopt clips once for every group (HybridOptions::max_grad_norm).
/// The norms are per param (its every element, on every rank that holds a piece): the
/// update reads each param twice, once for the norms and once to update.
struct LambConfig {
  static constexpr const char* name = "lamb";
  using Policy = Impl::LambPolicy;

  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  bool decoupled = true;  ///< apex adam_w_mode; false: weight_decay p added to the grad
  bool bias_correction = true;
  bool grad_averaging = true;
  bool trust_ratio = true;    ///< false: r = 1 (a param excluded from adaptation)
  bool always_adapt = false;  ///< r also where weight_decay is 0 (apex use_nvlamb)
  bool clamp_trust = false;
  double min_trust = 0.01;  ///< with clamp_trust
  double max_trust = 10.0;  ///< with clamp_trust
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value (lr, weight_decay >= 0;
  /// betas in [0, 1); eps > 0; 0 <= min_trust <= max_trust; all finite).
  void validate() const {
    const char* c = "LambConfig";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "beta1", beta1, beta1 >= 0.0 && beta1 < 1.0, "must be in [0, 1)");
    Impl::check_config_field(c, "beta2", beta2, beta2 >= 0.0 && beta2 < 1.0, "must be in [0, 1)");
    Impl::check_config_field(c, "eps", eps, eps > 0.0, "must be finite and > 0");
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0,
                             "must be finite and >= 0");
    Impl::check_config_field(c, "min_trust", min_trust, min_trust >= 0.0,
                             "must be finite and >= 0");
    Impl::check_config_field(c, "max_trust", max_trust, max_trust >= min_trust,
                             "must be finite and >= min_trust");
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("beta1", beta1), f("beta2", beta2), f("eps", eps);
    f("weight_decay", weight_decay), f("decoupled", decoupled);
    f("bias_correction", bias_correction), f("grad_averaging", grad_averaging);
    f("trust_ratio", trust_ratio), f("always_adapt", always_adapt);
    f("clamp_trust", clamp_trust), f("min_trust", min_trust), f("max_trust", max_trust);
    f("maximize", maximize);
  }
  /// LAMB's per-element state arrays, in order, as apex's state_dict names them.
  static constexpr std::array<const char*, 2> state_array_names{"exp_avg", "exp_avg_sq"};
  /// The state arrays a param of this group keeps (bit k: array k): exp_avg, exp_avg_sq.
  unsigned state_arrays() const { return 3u; }
  /// Its update needs sums over each whole param (kopt::Impl::needs_param_sums).
  static constexpr bool param_sums = true;
  /// Whether the trust ratio applies (else r = 1).
  bool adapts() const { return trust_ratio && (weight_decay != 0.0 || always_adapt); }
  bool operator==(const LambConfig&) const = default;
};

}  // namespace kopt
