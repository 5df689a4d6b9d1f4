#pragma once
/// \file
/// AdafactorConfig's policy (kopt/impl/policy.hpp): a policy with tensor sums (the norm of
/// each param before its update, kopt/impl/tensor_sums.hpp) and a tensor stage
/// (kopt/impl/tensor_stage.hpp) whose per-param state is its factored statistics. A step:
/// the measure pass sums p^2; variant 0 writes each element's scaled grad g to the stage's
/// workspace; `transform` updates the statistics, turns g into the direction u
/// (kopt/impl/factored_moments.hpp) and returns the param's rate a / max(1, RMS(u) / d);
/// variant 1 applies p (1 - lr weight_decay) - rate u.

#include <array>
#include <cmath>
#include <kopt/adafactor_config.hpp>
#include <kopt/impl/factored_moments.hpp>
#include <kopt/impl/policy.hpp>

namespace kopt {

/// The floats one param's Adafactor update needs this step.
struct AdafactorStepScalars {
  float grad_scale;  ///< negated for maximize
  float keep;        ///< 1 - lr weight_decay
  float rate;        ///< the engine sets each param's (transform's result)
  float beta;        ///< t^beta2_decay
  float eps1;
  double rho, eps2, d;
};

namespace Impl {

struct AdafactorPolicy {
  using Config = AdafactorConfig;
  using Scalars = AdafactorStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  /// 0: the scaled grad (every group's); 1: the update from the direction (the second pass).
  static constexpr int num_variants = 2;
  static int variant(const Config&) { return 0; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int) { return 0u; }

  /// One sum per param: of p^2, for its RMS.
  static constexpr int tensor_sums = 1;
  KOKKOS_INLINE_FUNCTION static constexpr bool measures(int variant) { return variant == 0; }
  KOKKOS_FORCEINLINE_FUNCTION static void measure(float p, float, float, float, float,
                                                  const Scalars&, float (&x)[tensor_sums]) {
    x[0] = p;
  }
  /// ||p|| (host code), which `transform` turns into the rate.
  static float rate(const Scalars&, const double (&sums)[tensor_sums]) {
    return static_cast<float>(std::sqrt(sums[0]));
  }

  static constexpr bool tensor_stage = true;
  template <class ExecSpace>
  using Work = FactoredWork<ExecSpace>;
  /// Floats of per-param state (row_var then col_var, or variance).
  static std::int64_t tensor_state_size(const Tensor& p) { return factored_state_size(p); }

  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    const auto step = static_cast<double>(t);
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.keep = static_cast<float>(1.0 - c.lr * c.weight_decay);
    s.rate = 0.0f;
    s.beta = static_cast<float>(std::pow(step, c.beta2_decay));
    s.eps1 = static_cast<float>(c.eps1);
    s.rho = std::min(c.lr, 1.0 / std::sqrt(step));
    s.eps2 = c.eps2;
    s.d = c.d;
    return s;
  }

  /// Between the variants (host code): the statistics `state` of param `p` updated from
  /// its scaled grad at `direction`, which becomes u; returns the rate, from `norm` = ||p||.
  template <class ExecSpace>
  static float transform(float* direction, const Tensor& p, const Scalars& s, float norm,
                         Work<ExecSpace>& work, float* state) {
    const double squares = factored_direction<ExecSpace>(
        direction, p, state, FactoredCoefficients{s.beta, s.eps1}, work);
    const double root_n = std::sqrt(static_cast<double>(p.numel));
    const double alpha = std::max(s.eps2, static_cast<double>(norm) / root_n) * s.rho;
    const double clip = p.numel == 0 ? 1.0 : std::max(1.0, std::sqrt(squares) / (root_n * s.d));
    return static_cast<float>(alpha / clip);
  }

  /// Variant 0 returns g (the engine stores it in place of the param); variant 1 takes u
  /// in place of the grad and returns the new param.
  template <int V>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float&, float&, float&,
                                                  const Scalars& s) {
    if constexpr (V == 0)
      return grad * s.grad_scale;
    else
      return p * s.keep - s.rate * grad;
  }
};

}  // namespace Impl
}  // namespace kopt
