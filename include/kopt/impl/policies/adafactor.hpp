#pragma once
/// \file
/// AdafactorConfig's policy (kopt/impl/policy.hpp): a policy with a tensor stage that reads
/// the grads (kopt/impl/tensor_stage.hpp), whose per-param state is its factored
/// statistics. A step reads the param and the grad twice each and writes the param once,
/// the least its equations allow (24 bytes per fp32 element), all of it in `transform` but
/// the update:
///   1. ||p||^2 of the whole param (kopt/impl/whole_param_norm.hpp), for its RMS;
///   2. the statistics updated from the grad, each row's and column's factor written to the
///      param's scratch, and ||u||^2 summed (kopt/impl/factored_moments.hpp); the param's
///      rate a / max(1, RMS(u) / d) returned;
///   3. the update (row-factored: the kernel gives it its element's row and column factors)
///      recomputes u and applies p (1 - lr weight_decay) - rate u.

#include <array>
#include <cmath>
#include <kopt/adafactor_config.hpp>
#include <kopt/impl/factored_moments.hpp>
#include <kopt/impl/policy.hpp>
#include <kopt/impl/tensor_stage.hpp>
#include <kopt/impl/whole_param_norm.hpp>

namespace kopt {

/// The floats one param's Adafactor update needs this step.
struct AdafactorStepScalars {
  float grad_scale;  ///< negated for maximize
  float keep;        ///< 1 - lr weight_decay
  float rate;        ///< the engine sets each param's (transform's result)
  float beta;        ///< t^beta2_decay
  float eps1;
  float cap;  ///< 1 / sqrt(eps1^2), the largest factor of u
  float row;  ///< the row factor of the elements updated (the kernel sets it)
  double rho, eps2, d;
};

namespace Impl {

struct AdafactorPolicy {
  using Config = AdafactorConfig;
  using Scalars = AdafactorStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  static constexpr int num_variants = 1;
  static int variant(const Config&) { return 0; }
  /// No per-element state; the update reads its column factors as array 0 (row_factored).
  /// The update's one array: the column factors (read only).
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int) { return 0u; }

  static constexpr bool tensor_stage = true;
  static constexpr bool stage_reads_grads = true;
  static constexpr bool row_factored = true;
  template <class ExecSpace>
  using Work = FactoredWork<ExecSpace>;
  /// Floats of per-param state (row_var then col_var, or variance).
  static std::int64_t tensor_state_size(const Tensor& p) { return factored_state_size(p); }
  /// Floats of per-param scratch: the row factors, then the column factors (a vector: one
  /// row of numel columns).
  static std::int64_t stage_scratch_size(const Tensor& p) { return factored_scratch_size(p); }
  /// The update's slot for `p`: its factors (scratch), rows of cols elements.
  static void apply_slot(UpdateSlot& slot, const Tensor& p, float*, float* scratch) {
    const std::int64_t rows = p.is_matrix() ? p.rows : 1;
    slot.state[0] = scratch + rows;
    slot.state[1] = scratch;
    slot.cols = p.is_matrix() ? p.cols : std::max<std::int64_t>(p.numel, 1);
  }

  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    const auto step = static_cast<double>(t);
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.keep = static_cast<float>(1.0 - c.lr * c.weight_decay);
    s.rate = 0.0f;
    s.beta = static_cast<float>(std::pow(step, c.beta2_decay));
    s.eps1 = static_cast<float>(c.eps1);
    s.cap = factored_cap(s.eps1);
    s.row = 1.0f;
    s.rho = std::min(c.lr, 1.0 / std::sqrt(step));
    s.eps2 = c.eps2;
    s.d = c.d;
    return s;
  }

  /// Before the update (host code): ||p|| measured, the statistics `state` of param `p`
  /// updated from its grad, its factors written; returns the rate.
  template <class ExecSpace>
  static float transform(const StageGrad& g, const Tensor& p, const Scalars& s, float,
                         Work<ExecSpace>& work, float* state) {
    const std::int64_t at = factored_norm_offset(p);  // ||p||'s block sums, past ||u||'s
    const std::int64_t blocks = whole_param_square_sums<ExecSpace>(g.param, p.numel, at, work);
    const std::int64_t parts =
        factored_step<ExecSpace>(g.data, g.dtype, p, state, g.scratch,
                                 FactoredCoefficients{s.beta, s.eps1, s.grad_scale}, work);
    work.fetch(at + blocks);  // the step's one wait for this param
    const double norm = std::sqrt(work.sum_in_order(at, blocks));
    const double squares = work.sum_in_order(0, parts);
    const double root_n = std::sqrt(static_cast<double>(p.numel));
    const double alpha = std::max(s.eps2, norm / root_n) * s.rho;
    const double clip = p.numel == 0 ? 1.0 : std::max(1.0, std::sqrt(squares) / (root_n * s.d));
    return static_cast<float>(alpha / clip);
  }

  /// The new param from u, recomputed as the transform's norm computed it; `col` is the
  /// element's column factor, s.row its row's.
  template <int>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& col, float&, float&,
                                                  const Scalars& s) {
    return p * s.keep - s.rate * factored_u(grad * s.grad_scale, s.row, col, s.cap);
  }
};

}  // namespace Impl
}  // namespace kopt
