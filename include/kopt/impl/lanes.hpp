#pragma once
/// \file
/// Host vectors of floats and of their bits (GCC and Clang's vector extensions), as wide as
/// the target's widest vector register, for loops that the auto-vectorizer will not write
/// well: the math templates (adam_update_guarded, the bf16 roundings) take them as they take
/// float and std::uint32_t, so the lanes run exactly the scalar bits, op for op.
///
/// What the vectorizer cannot do is branch per vector. Adam's overflow fallbacks cost a
/// fifth of every element's work, yet decide an element only when its interpolation
/// overflowed; the paired loop ran a strip unguarded, kept a copy of what it overwrote and
/// reran it guarded when a flag came back set, and the copy alone cost 11% of the 18-byte
/// step on one core (kopt/impl/paired_lanes.hpp tests the flags of each vector instead).

#include <cstdint>
#include <cstring>
#include <kopt/compat.hpp>

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
#if defined(__SSE__)
#include <immintrin.h>
#endif
namespace kopt::Impl {

/// Bytes per lane vector: the widest register the target has (a wider GCC vector type would
/// change the ABI of the functions that take it, and GCC warns so).
#if defined(__AVX512F__)
inline constexpr int lane_bytes = 64;
#elif defined(__AVX__)
inline constexpr int lane_bytes = 32;
#else
inline constexpr int lane_bytes = 16;
#endif
inline constexpr int lane_count = lane_bytes / 4;

using LaneF = float __attribute__((vector_size(lane_bytes)));
using LaneU = std::uint32_t __attribute__((vector_size(lane_bytes)));

/// The bits of a vector as another vector type of its size (the lanes' and the intrinsics';
/// taken by reference: a 64-byte vector passed by value draws GCC's ABI warning on AVX2).
template <class To, class From>
KOKKOS_FORCEINLINE_FUNCTION To lane_cast(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "a bit cast between vectors of one size");
  To to;
  std::memcpy(&to, &x, sizeof to);
  return to;
}
KOKKOS_FORCEINLINE_FUNCTION LaneU float_bits(LaneF x) { return lane_cast<LaneU>(x); }
KOKKOS_FORCEINLINE_FUNCTION LaneF bits_float(LaneU u) { return lane_cast<LaneF>(u); }

/// The correctly rounded square root of each lane (the loop compiles to one vector square
/// root under -fno-math-errno, which kopt's targets set).
KOKKOS_FORCEINLINE_FUNCTION LaneF sqrt_rn(LaneF x) {
  LaneF r;
  for (int l = 0; l < lane_count; ++l) r[l] = __builtin_sqrtf(x[l]);
  return r;
}

/// Lane vectors from memory and back (any alignment).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION LaneU load_lanes(const T* at) {
  LaneU u;
  std::memcpy(&u, static_cast<const void*>(at), sizeof u);
  return u;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void store_lanes(T* at, LaneU u) {
  std::memcpy(static_cast<void*>(at), &u, sizeof u);
}

/// Whether any lane of `u` has bit 31 set: a test and a branch on x86 (GCC reduces a lane
/// loop through every lane, 40 instructions for 16, as much as a fifth of an Adam update).
KOKKOS_FORCEINLINE_FUNCTION bool any_top_bit(LaneU u) {
#if defined(__AVX512F__)
  __m512i v;
  std::memcpy(&v, &u, sizeof v);
  return _mm512_test_epi32_mask(v, _mm512_set1_epi32(INT32_MIN)) != 0;
#elif defined(__AVX__)
  __m256 v;
  std::memcpy(&v, &u, sizeof v);
  return _mm256_movemask_ps(v) != 0;
#elif defined(__SSE__)
  __m128 v;
  std::memcpy(&v, &u, sizeof v);
  return _mm_movemask_ps(v) != 0;
#else
  std::uint32_t all = 0;
  for (int l = 0; l < lane_count; ++l) all |= u[l];
  return (all & 0x80000000u) != 0;
#endif
}

/// Which lanes of the vectors flagged so far were not finite (FlagOverflow's flags: Adam's
/// interpolations, kopt/adam_update.hpp): with AVX-512 a mask, one classifying instruction
/// per vector; with AVX2 and FMA a sum of x * 0 + sum, one instruction per vector (NaN in
/// every lane that ever saw an infinity or NaN, +0 elsewhere), tested once; else bit 31 of
/// (exponent bits + 1) per lane, two integer ops and an or. The mask took a cycle and a half
/// off the 18-byte step's 32 elements on a Zen 5 core; the sum 17 of the AVX2 loop's 163
/// instructions per 16 elements, and two of its 16 registers (the integer ops' constants).
struct LaneFlags {
#if defined(__AVX512DQ__)
  __mmask16 nonfinite = 0;
  KOKKOS_FORCEINLINE_FUNCTION void flag(LaneF x) {
    __m512 v;
    std::memcpy(&v, &x, sizeof v);
    constexpr int nan_or_inf = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +inf, -inf, SNaN
    nonfinite |= _mm512_fpclass_ps_mask(v, nan_or_inf);
  }
  KOKKOS_FORCEINLINE_FUNCTION bool any() const { return nonfinite != 0; }
#elif defined(__AVX__) && defined(__FMA__) && !defined(__AVX512F__)
  __m256 sum = _mm256_setzero_ps();
  KOKKOS_FORCEINLINE_FUNCTION void flag(LaneF x) {
    __m256 v;
    std::memcpy(&v, &x, sizeof v);
    sum = _mm256_fmadd_ps(v, _mm256_setzero_ps(), sum);
  }
  KOKKOS_FORCEINLINE_FUNCTION bool any() const {
    return _mm256_movemask_ps(_mm256_cmp_ps(sum, sum, _CMP_UNORD_Q)) != 0;
  }
#else
  LaneU top{};
  KOKKOS_FORCEINLINE_FUNCTION void flag(LaneF x) {
    top |= (float_bits(x) & 0x7f800000u) + 0x00800000u;
  }
  KOKKOS_FORCEINLINE_FUNCTION bool any() const { return any_top_bit(top); }
#endif
};

}  // namespace kopt::Impl
#endif
