#pragma once
/// \file
/// 16-bit elements widened and rounded 16 at a time, for the host loops. Where the CPU has
/// x86's F16C (the compiler defines __F16C__, e.g. -march=native on any x86 of the last ten
/// years) float16 uses its conversion instructions: two per 16 lanes each way, against ~3
/// cycles per element for the portable integer code, which made fp16 steps compute-bound
/// (0.41 of the memory ceiling, see README). Both round to nearest even and give the same
/// bits for every finite value and Inf; a NaN keeps its sign and top payload bits and comes
/// out quiet (the portable widening keeps a signalling float16 NaN signalling; the update's
/// arithmetic quietens it either way). Everything else, and device code, uses the portable
/// conversions.

#include <Kokkos_Core.hpp>
#include <kopt/storage_types.hpp>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX__) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
#include <immintrin.h>
#define KOPT_HAVE_F16C 1
#endif

namespace kopt::Impl {

inline constexpr int f16_block = 16;

/// dst[k] = float(src[k]) for k < 16.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void widen_block(const T* src, float* dst) {
#ifdef KOPT_HAVE_F16C
  if constexpr (std::is_same_v<T, float16>) {
#ifdef __AVX512F__  // one 16-lane conversion: the loop then reads dst whole, without a
                    // store-forwarding stall on two half-width stores
    // The masked forms with an explicit zero source: the plain ones start from an undefined
    // register, which GCC 12 reports as maybe-uninitialized.
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    _mm512_storeu_ps(dst, _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff, h));
#else
    for (int h = 0; h < f16_block; h += 8)
      _mm256_storeu_ps(dst + h,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + h))));
#endif
    return;
  }
#endif
  for (int k = 0; k < f16_block; ++k) dst[k] = to_float(src[k]);
}

/// dst[k] = T(src[k]) rounded to nearest even, for k < 16.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void round_block(const float* src, T* dst) {
#ifdef KOPT_HAVE_F16C
  if constexpr (std::is_same_v<T, float16>) {
#ifdef __AVX512F__
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                        _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, _mm512_loadu_ps(src),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    for (int h = 0; h < f16_block; h += 8)
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(dst + h),
          _mm256_cvtps_ph(_mm256_loadu_ps(src + h), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    return;
  }
#endif
  for (int k = 0; k < f16_block; ++k) dst[k] = from_float<T>(src[k]);
}

}  // namespace kopt::Impl
