#pragma once
/// \file
/// kopt::bfloat16 and kopt::float16: 2-byte storage types.
///
/// They are storage, not arithmetic types: kernels widen them to float, compute, and round
/// back once. Conversions are written in integer arithmetic only (plus one exact float
/// multiply), so they give the same bits on every backend and under any compiler flags;
/// Kokkos' own half_t/bhalf_t are 4-byte floats on host builds and cannot promise that.
/// float -> 16-bit rounds to nearest, ties to even; NaN stays NaN (quietened, sign kept);
/// +-Inf stays +-Inf; fp16 overflow gives +-Inf and tiny values become fp16 subnormals.

#include <Kokkos_Macros.hpp>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kopt {

namespace Impl {
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);  // the portable bit cast; compiles to a move
  return u;
}
KOKKOS_FORCEINLINE_FUNCTION float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// A float's bits `x` (not NaN) rounded to nearest even at bit 16: its bf16 bits are the
/// high half. Adding 0x7fff plus the lowest kept bit rounds; a carry into the exponent is the
/// right answer (up to the next binade, or to Inf past the max). For std::uint32_t and
/// kopt/impl/lanes.hpp's vectors of them (the lane loops' stores where no value is NaN).
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U bf16_rounded_up(U x) {
  return x + 0x7fffu + ((x >> 16) & 1u);
}

/// The bits of bfloat16::from_float(f) from f's bits `x`, in the low half of a 32-bit word: for
/// std::uint32_t, and for kopt/impl/lanes.hpp's vectors of them (the same ops lane by lane).
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U bf16_nearest_bits(U x) {
  const auto nan = (x & 0x7fffffffu) > 0x7f800000u;
  const U rounded = bf16_rounded_up(x) >> 16;
  return nan ? U((x >> 16) | 0x0040u) : rounded;
}
}  // namespace Impl

/// bfloat16: 1 sign, 8 exponent, 7 mantissa bits (the top half of a float).
struct bfloat16 {
  std::uint16_t bits;

  bfloat16() = default;  // trivial, as a float's: a View of them is zeroed, a local is not
  /// The value whose encoding is `b`. from_float rounds a float to the nearest value. An
  /// integer converts to the encoding too (bfloat16(1) is 9.2e-41, not 1): for a number,
  /// write bfloat16::from_float(1.0f).
  KOKKOS_FORCEINLINE_FUNCTION constexpr explicit bfloat16(std::uint16_t b) : bits(b) {}
  /// Refused, for it reads as a conversion: `bfloat16(x)` of a float x, while this was an
  /// aggregate, took x's integer part as the encoding (0.7f -> 0) and compiled with GCC and
  /// Clang. Write bfloat16::from_float(x).
  template <class F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  bfloat16(F) = delete;

  /// Rounds `f` to nearest even; NaN becomes a quiet NaN of the same sign.
  KOKKOS_FORCEINLINE_FUNCTION static bfloat16 from_float(float f) {
    return bfloat16{static_cast<std::uint16_t>(Impl::bf16_nearest_bits(Impl::float_bits(f)))};
  }
  /// Exact: every bfloat16 is a float.
  KOKKOS_FORCEINLINE_FUNCTION float to_float() const {
    return Impl::bits_float(static_cast<std::uint32_t>(bits) << 16);
  }
};

/// IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits; max 65504.
struct float16 {
  std::uint16_t bits;

  float16() = default;  // trivial, as a float's: a View of them is zeroed, a local is not
  /// The value whose encoding is `b`. from_float rounds a float to the nearest value.
  KOKKOS_FORCEINLINE_FUNCTION constexpr explicit float16(std::uint16_t b) : bits(b) {}
  /// Refused, for it reads as a conversion: `float16(x)` of a float x, while this was an
  /// aggregate, took x's integer part as the encoding (0.7f -> 0) and compiled with GCC and
  /// Clang. Write float16::from_float(x).
  template <class F, std::enable_if_t<std::is_floating_point_v<F>, int> = 0>
  float16(F) = delete;

  /// Rounds `f` to nearest even, to Inf past 65520 (the midpoint above 65504), and to
  /// subnormals (multiples of 2^-24) below 2^-14. Written as selects so the loop around it
  /// vectorizes.
  KOKKOS_FORCEINLINE_FUNCTION static float16 from_float(float f) {
    const std::uint32_t x = Impl::float_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t ax = x & 0x7fffffffu;
    const std::uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);  // quiet, payload kept
#if defined(__CUDA_ARCH__)
    // The GPU's conversion rounds the same way in one instruction; the integer version below
    // made steps with f16 moments compute-bound there (0.57 of their ceiling on an H200).
    // NaN keeps this type's own rule (its payload, quieted), not the GPU's canonical NaN.
    std::uint16_t rounded;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(rounded) : "f"(f));
    return float16{ax > 0x7f800000u ? static_cast<std::uint16_t>(sign | nan) : rounded};
#else
    // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped bits.
    const std::uint32_t norm_base = (ax >> 13) - (112u << 10);
    const std::uint32_t norm_rem = ax & 0x1fffu;
    // Round-up bits as 32-bit integers (no && or bool): the loops around this vectorize.
    const std::uint32_t norm = norm_base + ((norm_rem > 0x1000u ? 1u : 0u) |
                                            ((norm_rem == 0x1000u ? 1u : 0u) & norm_base & 1u));
    // Subnormal range: the value is mant24 * 2^(e-150); in units of 2^-24 that is
    // mant24 >> (126 - e). Shifts past 24 leave less than half a unit: zero.
    const std::uint32_t e = ax >> 23;
    const std::uint32_t mant24 = (ax & 0x7fffffu) | 0x800000u;
    // 14..25 on this branch; kept in 1..25 off it too (the value is computed branch-free and
    // then not used, but a shift by 32 or more would still be undefined behaviour).
    const std::uint32_t shift = e < 102u ? 25u : (e > 125u ? 1u : 126u - e);
    const std::uint32_t sub_base = shift < 25u ? (mant24 >> shift) : 0u;
    const std::uint32_t sub_rem = shift < 25u ? (mant24 & ((1u << shift) - 1u)) : mant24;
    const std::uint32_t sub_half = shift < 25u ? (1u << (shift - 1u)) : 0x1000000u;
    const std::uint32_t sub = sub_base + ((sub_rem > sub_half ? 1u : 0u) |
                                          ((sub_rem == sub_half ? 1u : 0u) & sub_base & 1u));
    std::uint32_t h = ax < 0x38800000u ? sub : norm;
    h = ax >= 0x477ff000u ? 0x7c00u : h;  // 65520 and up round to Inf
    h = ax > 0x7f800000u ? nan : h;
    return float16{static_cast<std::uint16_t>(sign | h)};
#endif
  }
  /// Exact: every float16 is a float.
  KOKKOS_FORCEINLINE_FUNCTION float to_float() const {
    const std::uint32_t h = bits;
    const std::uint32_t sign = (h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1fu;
    const std::uint32_t m = h & 0x3ffu;
#if defined(__CUDA_ARCH__)
    if (e != 0x1fu || m == 0u) {  // not NaN: one exact instruction (NaN keeps its payload below)
      float f;
      asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
      return f;
    }
#endif
    const std::uint32_t normal = ((e + 112u) << 23) | (m << 13);
    const std::uint32_t special = 0x7f800000u | (m << 13);  // Inf, or NaN with its payload
    // A subnormal is m * 2^-24 = 1.f * 2^(p-24), p the top set bit of m: normalize in
    // integers (a float multiply or int->float conversion here would keep GCC, under the
    // default -ftrapping-math, from vectorizing the selects).
    const std::uint32_t s8 = m > 0xffu ? 8u : 0u;
    const std::uint32_t s4 = (m >> s8) > 0xfu ? 4u : 0u;
    const std::uint32_t s2 = (m >> (s8 + s4)) > 0x3u ? 2u : 0u;
    const std::uint32_t p = s8 + s4 + s2 + ((m >> (s8 + s4 + s2)) > 0x1u ? 1u : 0u);
    const std::uint32_t subnormal =
        m == 0u ? 0u : ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
    const std::uint32_t mag = e == 0x1fu ? special : (e != 0u ? normal : subnormal);
    return Impl::bits_float(sign | mag);
  }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2, "16-bit storage must be 2 bytes");
static_assert(std::is_trivial_v<bfloat16> && std::is_trivial_v<float16>,
              "16-bit storage is copied as bytes and left uninitialized as floats are");

namespace Impl {
/// Widen any element type kopt stores to float.
KOKKOS_FORCEINLINE_FUNCTION float to_float(float x) { return x; }
KOKKOS_FORCEINLINE_FUNCTION float to_float(bfloat16 x) { return x.to_float(); }
KOKKOS_FORCEINLINE_FUNCTION float to_float(float16 x) { return x.to_float(); }

/// Round a float to element type T once.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return T::from_float(x);
  }
}
}  // namespace Impl

}  // namespace kopt
