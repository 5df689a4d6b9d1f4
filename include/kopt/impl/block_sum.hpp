#pragma once
/// \file
/// The grad norm's canonical block and its sum of squares, in one fixed order on every
/// backend. The host's vector forms (AVX2 with FMA; F16C for float16) read the grads in
/// their own dtype and give the portable form's bits: the norm pass is memory bound only
/// while this costs well under the time to read a block (~70 cycles of fp32 at 2 threads
/// on a 2-core EPYC; widening 16-bit grads through a stack array took 0.73 of the read).

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/storage_types.hpp>
#include <type_traits>
#if defined(__AVX2__) && defined(__FMA__) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
#include <immintrin.h>
#define KOPT_HAVE_BLOCK_SUM_AVX2 1
#endif
#ifdef __F16C__
#define KOPT_BLOCK_SUM_F16C true
#else
#define KOPT_BLOCK_SUM_F16C false
#endif

namespace kopt::Impl {

/// `norm_block` consecutive elements of a param, starting at a global offset that is a
/// multiple of it. Each block's sum of squares is computed in one fixed order and added
/// exactly: where a param is cut (a shard, a chunk) never changes a block, so never the sum.
inline constexpr int norm_block = 64;

/// The sum of squares of one block, in double, in its fixed order: eight lanes, lane k
/// adding elements k, k + 8, ..., k + 56 in turn, then lanes k and k + 4, then k and k + 2,
/// then the last two. Each square of a float is exact in double. `v` holds the block's
/// values, zeros where the block has no element (after the end of a param).
/// (In two steps, so a device team can give each lane a thread: block_lane, join_lanes.)
KOKKOS_FORCEINLINE_FUNCTION double block_lane(const float* v, int k) {
  double lane = static_cast<double>(v[k]) * static_cast<double>(v[k]);
  for (int r = 1; r < 8; ++r) {
    const double x = v[8 * r + k];
    lane += x * x;
  }
  return lane;
}
KOKKOS_FORCEINLINE_FUNCTION double join_lanes(double (&lane)[8]) {
  for (int k = 0; k < 4; ++k) lane[k] += lane[k + 4];
  for (int k = 0; k < 2; ++k) lane[k] += lane[k + 2];
  return lane[0] + lane[1];
}
KOKKOS_INLINE_FUNCTION double block_sum_of_squares_portable(const float* v) {
  double lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = block_lane(v, k);
  return join_lanes(lane);
}

#ifdef KOPT_HAVE_BLOCK_SUM_AVX2
/// Row r of a block (elements 8 r .. 8 r + 7), widened to double (exact): elements 8 r ..
/// 8 r + 3 in `lo`, the rest in `hi`. Conversions straight from memory where they can be:
/// a full-row load and a lane extract cost more.
inline void block_row(const float* v, int r, __m256d& lo, __m256d& hi) {
  lo = _mm256_cvtps_pd(_mm_loadu_ps(v + 8 * r));
  hi = _mm256_cvtps_pd(_mm_loadu_ps(v + 8 * r + 4));
}
inline void block_row(const bfloat16* v, int r, __m256d& lo, __m256d& hi) {
  // A bfloat16 is a float's top half: interleaving zeros below each gives the floats.
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 8 * r));
  const __m128i zero = _mm_setzero_si128();
  lo = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpacklo_epi16(zero, raw)));
  hi = _mm256_cvtps_pd(_mm_castsi128_ps(_mm_unpackhi_epi16(zero, raw)));
}
#ifdef __F16C__
inline void block_row(const float16* v, int r, __m256d& lo, __m256d& hi) {
  // Exact, like float16::to_float.
  const auto* p = reinterpret_cast<const __m128i*>(v + 8 * r);
  const __m128i raw = _mm_loadu_si128(p);
  lo = _mm256_cvtps_pd(_mm_cvtph_ps(raw));
  hi = _mm256_cvtps_pd(_mm_cvtph_ps(_mm_unpackhi_epi64(raw, raw)));
}
#endif
#endif

/// A prefetch of the block read_prefetch_bytes past `block`, line by line. The norm pass
/// does little work per byte, and with the hardware prefetcher alone it stayed at ~0.85 of
/// the read.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void prefetch_block_ahead(const T* block) {
  constexpr std::int64_t ahead = read_prefetch_bytes / static_cast<std::int64_t>(sizeof(T));
  constexpr std::int64_t per_line = 64 / static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t k = 0; k < norm_block; k += per_line) prefetch_ahead(block, ahead + k);
}

/// block_sum_of_squares_portable of a whole block of `T`s (float, bfloat16, float16), with
/// the host's vector FMA where it has one.
template <class T>
KOKKOS_INLINE_FUNCTION double block_sum_of_squares(const T* v) {
#ifdef KOPT_HAVE_BLOCK_SUM_AVX2
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bfloat16> ||
                (std::is_same_v<T, float16> && KOPT_BLOCK_SUM_F16C)) {
    // Lanes 0-3 and 4-7 as two vectors, the squares added by FMA: a float's square is
    // exact in double, so fma(x, x, s) rounds once, like x * x + s: the same bits, half the
    // instructions.
    __m256d lo, hi, a, b;
    block_row(v, 0, lo, hi);
    lo = _mm256_mul_pd(lo, lo);
    hi = _mm256_mul_pd(hi, hi);
    for (int r = 1; r < 8; ++r) {
      block_row(v, r, a, b);
      lo = _mm256_fmadd_pd(a, a, lo);
      hi = _mm256_fmadd_pd(b, b, hi);
    }
    double h[4];
    _mm256_storeu_pd(h, _mm256_add_pd(lo, hi));  // lanes k and k + 4
    return (h[0] + h[2]) + (h[1] + h[3]);
  }
#endif
  if constexpr (std::is_same_v<T, float>) {
    return block_sum_of_squares_portable(v);
  } else {
    float w[norm_block];
    for (int k = 0; k < norm_block; ++k) w[k] = to_float(v[k]);
    return block_sum_of_squares_portable(w);
  }
}

}  // namespace kopt::Impl
