#pragma once
/// \file
/// The Adam/AdamW update of one element: the math, written once. Every kernel and every
/// backend calls this function; none repeats it.

#include <cstdint>
#include <kopt/adam_config.hpp>
#include <kopt/compat.hpp>
#include <kopt/impl/lanes.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// `lerp` when it is finite, else `fallback` (NaN counts as not finite). Written as integer
/// masks, not `?:`: with a select GCC 12 sinks the fallback into a branch of its own and
/// then cannot if-convert the loop (it does not speculate float ops that may trap), and the
/// f32 and bf16 update loops do not vectorize. Masks leave no branch; host and device run
/// the same integer ops.
KOKKOS_FORCEINLINE_FUNCTION float finite_or(float lerp, float fallback) {
  const std::uint32_t l = float_bits(lerp);
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>((l & 0x7f800000u) != 0x7f800000u);
  return bits_float((l & keep) | (float_bits(fallback) & ~keep));
}
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// finite_or of each lane (kopt/impl/lanes.hpp): a vector select, no branch to sink.
KOKKOS_FORCEINLINE_FUNCTION LaneF finite_or(LaneF lerp, LaneF fallback) {
  return (float_bits(lerp) & 0x7f800000u) != 0x7f800000u ? lerp : fallback;
}
#endif

/// adam_update's guard: each interpolation where finite, else its fallback (computed always:
/// branch-free, as the vector loops need).
struct GuardEachElement {
  template <class T, class Fallback>
  KOKKOS_FORCEINLINE_FUNCTION T operator()(T lerp, const Fallback& fallback) const {
    return finite_or(lerp, fallback());
  }
};

/// No guard: the interpolation as it is, with bit 31 of `overflow` set where it is not finite
/// ((exponent bits + 1) carries into bit 31 only from an all-ones exponent). A caller runs a
/// block unguarded and, where the flag comes back set, the block again with GuardEachElement;
/// elements with finite interpolations are the same bits either way, so the pair is
/// adam_update bit for bit without computing the fallbacks (a fifth of the work) on every
/// element (kopt/impl/paired_loop.hpp; per lane vector, Flags LaneFlags: paired_lanes.hpp).
/// Flags with a flag(lerp) of their own (LaneFlags, kopt/impl/lanes.hpp) take it instead.
template <class Flags>
struct FlagOverflow {
  Flags& overflow;
  template <class T, class Fallback>
  KOKKOS_FORCEINLINE_FUNCTION T operator()(T lerp, const Fallback&) const {
    if constexpr (requires { overflow.flag(lerp); })
      overflow.flag(lerp);
    else
      overflow |= (float_bits(lerp) & 0x7f800000u) + 0x00800000u;
    return lerp;
  }
};

/// adam_update's math with either guard, on floats or on lane vectors of them
/// (kopt/impl/lanes.hpp; the same ops lane by lane).
template <bool Amsgrad, class T, class Guard>
KOKKOS_FORCEINLINE_FUNCTION T adam_update_guarded(T p, T grad, T& m, T& v, T& vmax,
                                                  const AdamStepScalars& s, const Guard& guard) {
  // AdamW (l2_decay 0) takes the scaled grad as it is, as torch's AdamW does: a term 0 * p
  // added only a zero of p's sign, or NaN from a non-finite param into both moments, and it
  // put the param's load (and a remainder's join) on the path to every square root, which
  // cost the 18-byte vector loop a seventh of its time on a Zen 5 core.
  const T scaled = grad * s.grad_scale;
  const T g = s.adds_l2 ? scaled + s.l2_decay * p : scaled;
  // The fallbacks take beta as 1 - (1 - beta) in float, off by ~3e-8: harmless, for they
  // decide only elements whose interpolation overflowed (and v, once inf, stays inf).
  const float a1 = s.one_minus_beta1, a2 = s.one_minus_beta2;
  const T m0 = m, v0 = v;
  m = guard(m0 + a1 * (g - m0), [&] { return (1.0f - a1) * m0 + a1 * g; });
  v = guard(v0 + a2 * (g * g - v0), [&] { return (1.0f - a2) * v0 + (a2 * g) * g; });
  T second = v;
  if constexpr (Amsgrad) {
    vmax = vmax < v ? v : vmax;
    second = vmax;
  }
  const T denom = KOPT_SQRT(second) * s.inv_sqrt_bc2 + s.eps;
  return p - (s.lr_decay * p + s.step_size * m / denom);
}

/// One element's fused Adam/AdamW update in float, with the step's scalars `s` (see
/// AdamConfig for the equations; the scalars fold maximize into the sign of grad_scale,
/// and Adam vs AdamW into l2_decay / lr_decay, so the only branch is on l2_decay, the same
/// for every element of a step):
///   g    = grad * grad_scale (+ l2_decay * p: Adam; AdamW adds no term)
///   m    = m + (1 - beta1) (g - m)                 (= beta1 m + (1 - beta1) g)
///   v    = v + (1 - beta2) (g^2 - v)               (= beta2 v + (1 - beta2) g^2)
///   vmax = max(vmax, v)                            (Amsgrad only; replaces v below)
///   p    = p - (lr_decay p + step_size m / (sqrt(v) inv_sqrt_bc2 + eps))
/// The interpolation forms use only 1 - beta, which a float holds to ~1e-8 *relative* to
/// itself; a float beta2 = 0.999 is off by ~3e-8 absolute, which biases v by ~3e-5 over a
/// thousand steps. Likewise the decoupled decay applies lr * weight_decay, not the rounded
/// factor 1 - lr * weight_decay, whose error would compound into the params step after step.
/// Where an interpolation form is not finite, torch's form beta x + (1 - beta) y decides that
/// element instead: once v is inf (one grad above ~1.8e19 makes g*g overflow), g^2 - v is
/// inf - inf = NaN and the param would stay NaN for good, while torch keeps v at inf and the
/// element's update at ~0; (1 - beta2) g g, multiplied in torch's order, holds v finite up to
/// |g| ~ 5.8e20; and m's g - m overflows for a huge g opposite to a huge m where
/// beta1 m + (1 - beta1) g stays finite (torch's lerp_ path overflows there too, and its
/// param goes NaN). Finite interpolations are kept bit for bit, so accuracy is unchanged.
/// Memory per element, done by the caller: read grad, p (or its fp32 master), m, v; write
/// p, m, v (+ the rounded 16-bit param): 28 bytes for fp32 and for bf16/f16 with master.
/// `vmax` is read and written only when Amsgrad (4 + 4 more bytes).
template <bool Amsgrad>
KOKKOS_FORCEINLINE_FUNCTION float adam_update(float p, float grad, float& m, float& v, float& vmax,
                                              const AdamStepScalars& s) {
  return adam_update_guarded<Amsgrad>(p, grad, m, v, vmax, s, GuardEachElement{});
}

}  // namespace kopt::Impl
