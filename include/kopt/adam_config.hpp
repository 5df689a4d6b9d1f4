#pragma once
/// \file
/// kopt::AdamConfig: one parameter group's Adam/AdamW hyperparameters.

#include <array>
#include <cstdint>

namespace kopt {

/// The largest step count kopt keeps for a param (2^53: a count t enters the update as a
/// double, beta^t, exact up to here). step() refuses to go past it, and a checkpoint with
/// a larger count (or loss-scaler growth tracker) is refused rather than overflowing later.
inline constexpr std::int64_t max_step_count = std::int64_t{1} << 53;

/// Hyperparameters of Adam (Kingma & Ba) and AdamW (Loshchilov & Hutter), as in
/// torch.optim.Adam/AdamW. The defaults are torch.optim.AdamW's; for Adam with L2 decay set
/// `.decoupled = false` and (torch.optim.Adam's default) `.weight_decay = 0`.
///
/// For each element, with g the gradient times the step's grad_scale (negated if
/// `maximize`), t the parameter's own step count:
///   L2 (decoupled = false):  g <- g + weight_decay * p
///   m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
///   amsgrad:                 vmax <- max(vmax, v), and vmax replaces v below
///   bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (both 1 without bias_correction)
///   AdamW (decoupled):       p <- p (1 - lr weight_decay)
///   p <- p - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
namespace Impl {
struct AdamPolicy;  // kopt/impl/policies/adam.hpp
}

struct AdamConfig {
  static constexpr const char* name = "adam";
  using Policy = Impl::AdamPolicy;

  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool decoupled = true;  ///< AdamW; false: Adam's L2 penalty added to the gradient
  bool amsgrad = false;
  bool bias_correction = true;
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value when a value is
  /// non-finite or out of range (lr >= 0, 0 <= beta < 1, eps > 0, weight_decay >= 0).
  void validate() const;

  /// Adam's per-element state arrays, in order, as torch's state_dict names them.
  static constexpr std::array<const char*, 3> state_array_names{"exp_avg", "exp_avg_sq",
                                                                "max_exp_avg_sq"};
  /// The state arrays a param of this group keeps (bit k: array k): exp_avg, exp_avg_sq, and
  /// max_exp_avg_sq with amsgrad.
  unsigned state_arrays() const { return amsgrad ? 7u : 3u; }
  /// Adam's arrays may be stored as DType::q8 (blockwise 8-bit codes): exp_avg signed, and
  /// exp_avg_sq and max_exp_avg_sq (bits 1 and 2), never negative, as their square roots
  /// (kopt/impl/block_q8.hpp says why). Algorithms without this member keep no q8 state.
  static constexpr unsigned q8_square_arrays = 6u;
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("beta1", beta1), f("beta2", beta2), f("eps", eps);
    f("weight_decay", weight_decay), f("decoupled", decoupled), f("amsgrad", amsgrad);
    f("bias_correction", bias_correction), f("maximize", maximize);
  }
  bool operator==(const AdamConfig&) const = default;
};

/// The float scalars one parameter's update needs this step, computed once on the host in
/// double from its group's config and its own step count t (t >= 1).
struct AdamStepScalars {
  float grad_scale;  ///< clip/unscale factor, negated for maximize
  float one_minus_beta1;
  float one_minus_beta2;
  float l2_decay;      ///< Adam: weight_decay; AdamW: 0
  float lr_decay;      ///< AdamW: lr weight_decay; Adam: 0
  float step_size;     ///< lr / bc1
  float inv_sqrt_bc2;  ///< 1 / sqrt(bc2)
  float eps;
  /// l2_decay != 0 (set by make), tested for each half vector of the host's lane loops: a
  /// flag in a register where the float took a move, a zero and a compare each time (6 of the
  /// AVX2 18-byte loop's ~130 instructions per 16 elements).
  bool adds_l2 = false;

  /// Step scalars for step `t` of a param in a group with `config`; `grad_scale` is the
  /// step's global factor (1, or clip / loss_scale).
  static AdamStepScalars make(const AdamConfig& config, std::int64_t t, double grad_scale);
};

}  // namespace kopt
