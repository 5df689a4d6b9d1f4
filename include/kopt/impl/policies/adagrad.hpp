#pragma once
/// \file
/// AdagradConfig's policy (kopt/impl/policy.hpp): its step scalars and its element update.

#include <array>
#include <kopt/adagrad_config.hpp>
#include <kopt/impl/policy.hpp>

namespace kopt {

/// The floats one param's Adagrad update needs this step.
struct AdagradStepScalars {
  float grad_scale;  ///< negated for maximize
  float weight_decay;
  float keep;     ///< 1, or 0 at t = 1 (the stored sum is not read before the first step)
  float initial;  ///< initial_accumulator_value
  float clr;      ///< lr / (1 + (t - 1) lr_decay)
  float eps;
};

namespace Impl {

struct AdagradPolicy {
  using Config = AdagradConfig;
  using Scalars = AdagradStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  static constexpr int num_variants = 1;
  static int variant(const Config&) { return 0; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int) { return 1u; }
  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.weight_decay = static_cast<float>(c.weight_decay);
    s.keep = t == 1 ? 0.0f : 1.0f;
    s.initial = static_cast<float>(c.initial_accumulator_value);
    s.clr = static_cast<float>(c.lr / (1.0 + static_cast<double>(t - 1) * c.lr_decay));
    s.eps = static_cast<float>(c.eps);
    return s;
  }
  template <int>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& sum, float&, float&,
                                                  const Scalars& s) {
    const float g = grad * s.grad_scale + s.weight_decay * p;
    sum = (s.keep == 0.0f ? s.initial : sum) + g * g;
    return p - s.clr * (g / (KOPT_SQRT(sum) + s.eps));  // torch's order: addcdiv
  }
};

}  // namespace Impl
}  // namespace kopt
