#pragma once
/// \file
/// SgdConfig's policy (kopt/impl/policy.hpp): its step scalars and its element update.

#include <array>
#include <kopt/impl/policy.hpp>
#include <kopt/sgd_config.hpp>

namespace kopt {

/// The floats one param's SGD update needs this step.
struct SgdStepScalars {
  float grad_scale;  ///< negated for maximize
  float weight_decay;
  float keep;      ///< momentum, or 0 at t = 1 (the buffer starts as the gradient)
  float take;      ///< 1 - dampening, or 1 at t = 1
  float momentum;  ///< Nesterov's look-ahead
  float lr;
};

namespace Impl {

struct SgdPolicy {
  using Config = SgdConfig;
  using Scalars = SgdStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  /// 0: plain; 1: momentum; 2: Nesterov momentum.
  static constexpr int num_variants = 3;
  static int variant(const Config& c) { return c.momentum == 0.0 ? 0 : (c.nesterov ? 2 : 1); }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int variant) {
    return variant == 0 ? 0u : 1u;
  }
  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    Scalars s;
    s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
    s.weight_decay = static_cast<float>(c.weight_decay);
    s.keep = t == 1 ? 0.0f : static_cast<float>(c.momentum);
    s.take = t == 1 ? 1.0f : static_cast<float>(1.0 - c.dampening);
    s.momentum = static_cast<float>(c.momentum);
    s.lr = static_cast<float>(c.lr);
    return s;
  }
  template <int V>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float grad, float& buf, float&, float&,
                                                  const Scalars& s) {
    float g = grad * s.grad_scale + s.weight_decay * p;
    if constexpr (V > 0) {
      // At t = 1 keep is 0 and the (zero) buffer is not read into the sum: b = g exactly.
      buf = (s.keep == 0.0f ? 0.0f : s.keep * buf) + s.take * g;
      g = V == 2 ? g + s.momentum * buf : buf;
    }
    return p - s.lr * g;
  }
};

}  // namespace Impl
}  // namespace kopt
