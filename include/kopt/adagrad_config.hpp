#pragma once
/// \file
/// kopt::AdagradConfig: Adagrad (Duchi et al. 2011) as torch.optim.Adagrad.

#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct AdagradPolicy;  // kopt/impl/policies/adagrad.hpp
}

/// torch.optim.Adagrad's hyperparameters, names and defaults. For each element, with g the
/// gradient times the step's grad_scale (negated if `maximize`), t the param's step count:
///   g <- g + weight_decay * p
///   clr = lr / (1 + (t - 1) lr_decay)
///   sum <- sum + g^2                 (sum starts at initial_accumulator_value)
///   p <- p - clr g / (sqrt(sum) + eps)
/// One state array (sum). Before the first step kopt stores the sum as 0 and adds
/// initial_accumulator_value in step 1 (the same values from then on).
struct AdagradConfig {
  static constexpr const char* name = "adagrad";
  using Policy = Impl::AdagradPolicy;

  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value (every value finite and
  /// >= 0).
  void validate() const {
    const char* c = "AdagradConfig";
    const char* rule = "must be finite and >= 0";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, rule);
    Impl::check_config_field(c, "lr_decay", lr_decay, lr_decay >= 0.0, rule);
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0, rule);
    Impl::check_config_field(c, "initial_accumulator_value", initial_accumulator_value,
                             initial_accumulator_value >= 0.0, rule);
    Impl::check_config_field(c, "eps", eps, eps >= 0.0, rule);
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("lr_decay", lr_decay), f("weight_decay", weight_decay);
    f("initial_accumulator_value", initial_accumulator_value), f("eps", eps);
    f("maximize", maximize);
  }
  /// Adagrad's per-element state arrays, in order, as torch's state_dict names them.
  static constexpr std::array<const char*, 1> state_array_names{"sum"};
  /// The state arrays a param of this group keeps (bit k: array k): sum.
  unsigned state_arrays() const { return 1u; }
  bool operator==(const AdagradConfig&) const = default;
};

}  // namespace kopt
