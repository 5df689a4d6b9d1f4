#pragma once
/// \file
/// MuonConfig's policy (kopt/impl/policy.hpp): a policy with a tensor stage
/// (kopt/impl/tensor_stage.hpp). Its update is not elementwise: the direction of a param
/// depends on the whole matrix. The engine runs it in three parts: variant 0 over every
/// element (the momentum, and the direction U written to a workspace in place of the
/// param), `transform` on each param's U as a matrix (Newton-Schulz, gemm-bound), then
/// variant 1 over every element with the result in place of the grad.

#include <algorithm>
#include <array>
#include <cmath>
#include <kopt/impl/newton_schulz.hpp>
#include <kopt/impl/policy.hpp>
#include <kopt/muon_config.hpp>

namespace kopt {

/// The floats one param's Muon update needs this step.
struct MuonStepScalars {
  float grad_scale;
  float momentum, one_minus_momentum;
  bool nesterov;
  float keep;  ///< 1 - lr weight_decay
  float rate;  ///< lr s: the engine sets each param's from its shape (MuonConfig::lr_scale)
  double lr;
  bool match_rms_adamw;
  Impl::NewtonSchulzCoefficients ns;
};

namespace Impl {

struct MuonPolicy {
  using Config = MuonConfig;
  using Scalars = MuonStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  /// 0: the momentum and the direction (every group's); 1: the update from the transformed
  /// direction (the engine's second pass; keeps no state).
  static constexpr int num_variants = 2;
  static int variant(const Config&) { return 0; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int variant) {
    return variant == 0 ? 1u : 0u;
  }
  /// Each param's direction goes through `transform` as a matrix between the two variants.
  static constexpr bool tensor_stage = true;
  template <class ExecSpace>
  using Work = NewtonSchulzWork<ExecSpace>;

  static Scalars scalars(const Config& c, std::int64_t, double grad_scale) {
    Scalars s;
    s.grad_scale = static_cast<float>(grad_scale);
    s.momentum = static_cast<float>(c.momentum);
    s.one_minus_momentum = static_cast<float>(1.0 - c.momentum);
    s.nesterov = c.nesterov;
    s.keep = static_cast<float>(1.0 - c.lr * c.weight_decay);
    s.lr = c.lr;
    s.rate = static_cast<float>(c.lr);
    s.match_rms_adamw = c.match_rms_adamw;
    s.ns =
        NewtonSchulzCoefficients{static_cast<float>(c.ns_a), static_cast<float>(c.ns_b),
                                 static_cast<float>(c.ns_c), c.eps, static_cast<int>(c.ns_steps)};
    return s;
  }

  /// lr s of a rows x cols param (host code).
  static float rate(const Scalars& s, std::int64_t rows, std::int64_t cols) {
    MuonConfig c;
    c.match_rms_adamw = s.match_rms_adamw;
    return static_cast<float>(s.lr *
                              c.lr_scale(static_cast<double>(rows), static_cast<double>(cols)));
  }

  /// Between the variants (host code): the direction of the rows x cols param `p`,
  /// orthogonalized in place; returns its rate lr s. Muon keeps no per-param state.
  template <class ExecSpace>
  static float transform(float* direction, const Tensor& p, const Scalars& s, float,
                         Work<ExecSpace>& work, float*) {
    newton_schulz<ExecSpace>(direction, p.rows, p.cols, s.ns, work);
    return rate(s, p.rows, p.cols);
  }

  /// Variant 0 returns U (the engine stores it in place of the param) and updates the
  /// momentum buffer; variant 1 takes O in place of the grad and returns the new param.
  template <int V>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& buf, float&, float&,
                                                  const Scalars& s) {
    if constexpr (V == 0) {
      const float g = grad * s.grad_scale;
      buf = buf + s.one_minus_momentum * (g - buf);
      return s.nesterov ? g + s.momentum * (buf - g) : buf;
    } else {
      return p * s.keep - s.rate * grad;
    }
  }
};

}  // namespace Impl
}  // namespace kopt
