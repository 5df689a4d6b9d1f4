#pragma once
/// \file
/// kopt::LionConfig: Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
/// Algorithms"), the sign of an interpolated momentum, with decoupled decay.

#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct LionPolicy;  // kopt/impl/policies/lion.hpp
}

/// Lion's hyperparameters with the paper's defaults (lr 1e-4, betas (0.9, 0.99), no decay).
/// For each element, with g the gradient times the step's grad_scale (negated if
/// `maximize`):
///   p <- p (1 - lr weight_decay)
///   p <- p - lr sign(beta1 m + (1 - beta1) g)      (sign(0) = 0)
///   m <- beta2 m + (1 - beta2) g
/// One state array (exp_avg). The update has size lr in every element, so Lion's lr is
/// usually 3-10x smaller than AdamW's and its weight_decay 3-10x larger.
struct LionConfig {
  static constexpr const char* name = "lion";
  using Policy = Impl::LionPolicy;

  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value (lr, weight_decay finite
  /// and >= 0; betas in [0, 1]).
  void validate() const {
    const char* c = "LionConfig";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "beta1", beta1, beta1 >= 0.0 && beta1 <= 1.0, "must be in [0, 1]");
    Impl::check_config_field(c, "beta2", beta2, beta2 >= 0.0 && beta2 <= 1.0, "must be in [0, 1]");
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0,
                             "must be finite and >= 0");
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("beta1", beta1), f("beta2", beta2), f("weight_decay", weight_decay);
    f("maximize", maximize);
  }
  /// Lion's per-element state arrays, in order, as torch's state_dict names them.
  static constexpr std::array<const char*, 1> state_array_names{"exp_avg"};
  /// The state arrays a param of this group keeps (bit k: array k): exp_avg.
  unsigned state_arrays() const { return 1u; }
  bool operator==(const LionConfig&) const = default;
};

}  // namespace kopt
