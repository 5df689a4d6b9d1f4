#pragma once
/// \file
/// LionConfig's policy (kopt/impl/policy.hpp): its step scalars and its element update.

#include <array>
#include <kopt/impl/policy.hpp>
#include <kopt/lion_config.hpp>

namespace kopt {

/// The floats one param's Lion update needs this step.
struct LionStepScalars {
  float grad_scale;  ///< negated for maximize
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float lr_decay;  ///< lr weight_decay
  float lr;
};

namespace Impl {

struct LionPolicy {
  using Config = LionConfig;
  using Scalars = LionStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  static constexpr int num_variants = 1;
  static int variant(const Config&) { return 0; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int) { return 1u; }
  static Scalars scalars(const Config& c, std::int64_t, double grad_scale) {
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.beta1 = static_cast<float>(c.beta1);
    s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
    s.beta2 = static_cast<float>(c.beta2);
    s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
    s.lr_decay = static_cast<float>(c.lr * c.weight_decay);
    s.lr = static_cast<float>(c.lr);
    return s;
  }
  template <int>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& m, float&, float&,
                                                  const Scalars& s) {
    const float g = grad * s.grad_scale;
    const float direction = sign_of(s.beta1 * m + s.one_minus_beta1 * g);
    m = s.beta2 * m + s.one_minus_beta2 * g;
    // The decay applies lr * weight_decay, not the rounded factor 1 - lr * weight_decay.
    return p - (s.lr_decay * p + s.lr * direction);
  }
};

}  // namespace Impl
}  // namespace kopt
