#pragma once
/// \file
/// kopt::MuonConfig: Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers in
/// neural networks"), momentum orthogonalized by a Newton-Schulz iteration, as
/// torch.optim.Muon (2.9+).

#include <algorithm>
#include <array>
#include <cmath>
#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct MuonPolicy;  // kopt/impl/policies/muon.hpp
}

/// Muon's hyperparameters with torch.optim.Muon's defaults. For each param, a matrix of
/// rows x cols (kopt::Tensor::matrix), with g its gradient times the step's grad_scale:
///   B <- B + (1 - momentum) (g - B)                       (B: momentum_buffer, from 0)
///   U  = g + momentum (B - g) with nesterov, else B
///   O  = NS(U): X = U / max(||U||_F, eps), then ns_steps times
///        A = X X^T, X <- ns_a X + (ns_b A + ns_c A A) X   (on U^T when rows > cols)
///   p <- p (1 - lr weight_decay) - lr s O
/// with s = sqrt(max(1, rows / cols)) ("original"), or 0.2 sqrt(max(rows, cols)) with
/// match_rms_adamw (Moonshot's, so that AdamW's lr and weight_decay carry over); torch
/// 2.15's "spectral_unclamped", sqrt(rows / cols), is not offered yet. The
/// iteration runs in fp32 on KokkosBlas::gemm (torch runs it in bf16): its result is an
/// approximate orthogonalization, singular values in about [0.7, 1.2], not UV^T.
/// Muon is for the 2-D weights of hidden layers: a param without a 2-D shape is refused,
/// naming it; give embeddings, heads, biases and norms an AdamW group of the same
/// optimizer. torch's `use_addmm` only picks its kernel and has no counterpart.
struct MuonConfig {
  static constexpr const char* name = "muon";
  using Policy = Impl::MuonPolicy;

  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  double ns_a = 3.4445;  ///< torch's ns_coefficients (a, b, c)
  double ns_b = -4.775;
  double ns_c = 2.0315;
  double eps = 1e-7;
  double ns_steps = 5;           ///< an integer in [0, 99] (a double: every config field is one)
  bool match_rms_adamw = false;  ///< torch's adjust_lr_fn: false "original", true "match_rms_adamw"

  /// Throws kopt::InvalidArgument naming the field and its value (lr, weight_decay,
  /// momentum >= 0; eps > 0; ns_steps an integer in [0, 99], as torch; all finite).
  void validate() const {
    const char* c = "MuonConfig";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0,
                             "must be finite and >= 0");
    Impl::check_config_field(c, "momentum", momentum, momentum >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "ns_a", ns_a, true, "must be finite");
    Impl::check_config_field(c, "ns_b", ns_b, true, "must be finite");
    Impl::check_config_field(c, "ns_c", ns_c, true, "must be finite");
    Impl::check_config_field(c, "eps", eps, eps > 0.0, "must be finite and > 0");
    Impl::check_config_field(
        c, "ns_steps", ns_steps,
        ns_steps >= 0.0 && ns_steps < 100.0 && ns_steps == std::floor(ns_steps),
        "must be an integer in [0, 99]");
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("weight_decay", weight_decay), f("momentum", momentum);
    f("nesterov", nesterov), f("ns_a", ns_a), f("ns_b", ns_b), f("ns_c", ns_c), f("eps", eps);
    f("ns_steps", ns_steps), f("match_rms_adamw", match_rms_adamw);
  }
  /// Muon's per-element state, as torch's state_dict names it.
  static constexpr std::array<const char*, 1> state_array_names{"momentum_buffer"};
  unsigned state_arrays() const { return 1u; }
  /// Each param is a whole matrix: its update needs every element of it at once
  /// (kopt::Impl::needs_whole_matrices).
  static constexpr bool whole_matrices = true;
  /// The lr scale s of a rows x cols param (see above).
  double lr_scale(double rows, double cols) const {
    return match_rms_adamw ? 0.2 * std::sqrt(std::max(rows, cols))
                           : std::sqrt(std::max(1.0, rows / cols));
  }
  bool operator==(const MuonConfig&) const = default;
};

}  // namespace kopt
