#pragma once
/// \file
/// kopt::SgdConfig: stochastic gradient descent with momentum, dampening, Nesterov
/// momentum, L2 weight decay and maximize, as torch.optim.SGD.

#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct SgdPolicy;  // kopt/impl/policies/sgd.hpp
}

/// torch.optim.SGD's hyperparameters, names and defaults. For each element, with g the
/// gradient times the step's grad_scale (negated if `maximize`), t the param's step count:
///   g <- g + weight_decay * p
///   momentum != 0:  b <- g at t = 1 (torch creates the buffer from the first gradient),
///                   else b <- momentum b + (1 - dampening) g
///                   g <- g + momentum b (nesterov), else g <- b
///   p <- p - lr g
/// With momentum 0 the param keeps no state. torch creates b in the first step in which
/// momentum is not 0; kopt at t = 1: where momentum is raised from 0 later, b starts at 0
/// (b <- (1 - dampening) g), the same as torch's b <- g with dampening 0 (the default).
/// Nesterov needs momentum > 0 and dampening 0.
struct SgdConfig {
  static constexpr const char* name = "sgd";
  using Policy = Impl::SgdPolicy;

  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value (every value finite;
  /// lr, momentum, weight_decay >= 0; nesterov with momentum > 0 and dampening == 0).
  void validate() const {
    const char* c = "SgdConfig";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "momentum", momentum, momentum >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "dampening", dampening, true, "must be finite");
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0,
                             "must be finite and >= 0");
    KOPT_THROW_IF(nesterov && (momentum <= 0.0 || dampening != 0.0),
                  "SgdConfig.nesterov = true is invalid with momentum = "
                      << momentum << " and dampening = " << dampening
                      << ": Nesterov momentum needs momentum > 0 and dampening = 0");
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("momentum", momentum), f("dampening", dampening);
    f("weight_decay", weight_decay), f("nesterov", nesterov), f("maximize", maximize);
  }
  /// SGD's per-element state arrays, in order, as torch's state_dict names them.
  static constexpr std::array<const char*, 1> state_array_names{"momentum_buffer"};
  /// The state arrays a param of this group keeps (bit k: array k): momentum_buffer, unless
  /// momentum is 0.
  unsigned state_arrays() const { return momentum == 0.0 ? 0u : 1u; }
  bool operator==(const SgdConfig&) const = default;
};

}  // namespace kopt
