#pragma once
/// \file
/// The Adam/AdamW update of one element: the math, written once. Every kernel and every
/// backend calls this function; none repeats it.

#include <kopt/adam_config.hpp>
#include <kopt/compat.hpp>

namespace kopt::Impl {

/// One element's fused Adam/AdamW update in float, with the step's scalars `s` (see
/// AdamConfig for the equations; the scalars fold maximize into the sign of grad_scale,
/// and Adam vs AdamW into l2_decay / lr_decay, so no per-element branch remains):
///   g    = grad * grad_scale + l2_decay * p
///   m    = m + (1 - beta1) (g - m)                 (= beta1 m + (1 - beta1) g)
///   v    = v + (1 - beta2) (g^2 - v)               (= beta2 v + (1 - beta2) g^2)
///   vmax = max(vmax, v)                            (Amsgrad only; replaces v below)
///   p    = p - (lr_decay p + step_size m / (sqrt(v) inv_sqrt_bc2 + eps))
/// The interpolation forms use only 1 - beta, which a float holds to ~1e-8 *relative* to
/// itself; a float beta2 = 0.999 is off by ~3e-8 absolute, which biases v by ~3e-5 over a
/// thousand steps. Likewise the decoupled decay applies lr * weight_decay, not the rounded
/// factor 1 - lr * weight_decay, whose error would compound into the params step after step.
/// Memory per element, done by the caller: read grad, p (or its fp32 master), m, v; write
/// p, m, v (+ the rounded 16-bit param): 28 bytes for fp32 and for bf16/f16 with master.
/// `vmax` is read and written only when Amsgrad (4 + 4 more bytes).
template <bool Amsgrad>
KOKKOS_FORCEINLINE_FUNCTION float adam_update(float p, float grad, float& m, float& v, float& vmax,
                                              const AdamStepScalars& s) {
  const float g = grad * s.grad_scale + s.l2_decay * p;
  m = m + s.one_minus_beta1 * (g - m);
  v = v + s.one_minus_beta2 * (g * g - v);
  float second = v;
  if constexpr (Amsgrad) {
    vmax = vmax < v ? v : vmax;
    second = vmax;
  }
  const float denom = KOPT_SQRT(second) * s.inv_sqrt_bc2 + s.eps;
  return p - (s.lr_decay * p + s.step_size * m / denom);
}

}  // namespace kopt::Impl
