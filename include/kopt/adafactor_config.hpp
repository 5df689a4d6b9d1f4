#pragma once
/// \file
/// kopt::AdafactorConfig: Adafactor (Shazeer and Stern 2018, "Adafactor: Adaptive Learning
/// Rates with Sublinear Memory Cost"), a second moment kept as row and column factors, as
/// torch.optim.Adafactor (2.5+).

#include <array>
#include <cmath>
#include <cstdint>
#include <kopt/impl/config_checks.hpp>

namespace kopt {

namespace Impl {
struct AdafactorPolicy;  // kopt/impl/policies/adafactor.hpp
}

/// Adafactor's hyperparameters with torch.optim.Adafactor's defaults. For each param, with
/// g its gradient times the step's grad_scale (negated if `maximize`), t its step count and
/// n its numel:
///   b  = t^beta2_decay,  rho = min(lr, 1 / sqrt(t))
///   a  = max(eps2, ||p|| / sqrt(n)) rho                    (p before this step)
///   p <- p (1 - lr weight_decay)
///   a rows x cols param (kopt::Tensor::matrix), factored:
///     R <- R + b (mean over each row of g^2 - R)           (row_var: rows floats)
///     C <- C + b (mean over each column of g^2 - C)        (col_var: cols floats)
///     V  = R C^T / max(mean(R), eps1)
///   a param without a shape:
///     V <- V + b (g^2 - V)                                 (variance: n floats)
///   u  = g / sqrt(max(V, eps1^2))
///   p <- p - a / max(1, ||u|| / (sqrt(n) d)) u
/// The state is per param, not per element: rows + cols floats for a matrix (about 0 bytes
/// per element), n for a vector. torch's eps1 None is the param dtype's epsilon; kopt
/// computes every update in fp32 (fp32 masters of 16-bit params), so its default is fp32's,
/// 2^-23: what torch gives fp32 params. The sums (row, column, norms) are in double, each in
/// one fixed order: the same bits on every thread count, rank count and engine.
struct AdafactorConfig {
  static constexpr const char* name = "adafactor";
  using Policy = Impl::AdafactorPolicy;

  double lr = 1e-2;
  double beta2_decay = -0.8;
  double eps1 = 1.1920928955078125e-07;  ///< torch's eps[0] (None: fp32's epsilon, see above)
  double eps2 = 1e-3;                    ///< torch's eps[1]
  double d = 1.0;                        ///< the update's RMS clipping threshold
  double weight_decay = 0.0;
  bool maximize = false;

  /// Throws kopt::InvalidArgument naming the field and its value (lr, eps1, eps2,
  /// weight_decay >= 0; beta2_decay <= 0; d >= 1; all finite), as torch checks them.
  void validate() const {
    const char* c = "AdafactorConfig";
    Impl::check_config_field(c, "lr", lr, lr >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "beta2_decay", beta2_decay, beta2_decay <= 0.0,
                             "must be finite and <= 0");
    Impl::check_config_field(c, "eps1", eps1, eps1 >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "eps2", eps2, eps2 >= 0.0, "must be finite and >= 0");
    Impl::check_config_field(c, "d", d, d >= 1.0, "must be finite and >= 1");
    Impl::check_config_field(c, "weight_decay", weight_decay, weight_decay >= 0.0,
                             "must be finite and >= 0");
  }
  /// Calls f(name, field) for every field, in the order a checkpoint stores them.
  template <class F>
  void visit_fields(F&& f) {
    f("lr", lr), f("beta2_decay", beta2_decay), f("eps1", eps1), f("eps2", eps2), f("d", d);
    f("weight_decay", weight_decay), f("maximize", maximize);
  }
  /// No per-element state: its state is per param (row_var and col_var, or variance).
  static constexpr std::array<const char*, 0> state_array_names{};
  unsigned state_arrays() const { return 0u; }
  /// The names of its per-param state, as torch's state_dict: a matrix's, a vector's.
  static constexpr std::array<const char*, 2> matrix_state_names{"row_var", "col_var"};
  static constexpr const char* vector_state_name = "variance";
  /// Floats of per-param state of a param of `numel` elements and rows x cols (rows < 0:
  /// no shape): rows + cols, or numel; none for an empty param (its update does nothing).
  static std::int64_t tensor_state_size(std::int64_t rows, std::int64_t cols, std::int64_t numel) {
    return numel == 0 ? 0 : rows >= 0 ? rows + cols : numel;
  }
  /// Its update needs each param whole on one engine (kopt::Impl::needs_whole_tensors),
  /// which measures ||p|| itself.
  static constexpr bool whole_tensors = true;
  bool operator==(const AdafactorConfig&) const = default;
};

}  // namespace kopt
