#pragma once
/// \file
/// An exact, order-independent sum of non-negative doubles: the accumulator behind the
/// global grad norm. Adding the same values in any order, split in any way across threads,
/// teams, engines and ranks, gives the same bits: the sum is a fixed-point integer, and
/// integer addition is associative. This is what makes the norm (and every clipped param)
/// identical for every grouping, registration order, placement, thread count and world size.
///
/// The fixed point covers what the norm adds: sums of squares of floats. A float is a
/// multiple of 2^-149, so its square, and any sum of squares, is a multiple of 2^-298; a
/// block of 64 squares is below 2^262. Bits of 2^-298 and up are held in 32-bit digits
/// stored in 64-bit words: an add touches three digits and never carries, so 2^31 adds fit
/// before normalize() must propagate carries (callers normalize per chunk and per join).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#if defined(__AVX__) && defined(__FMA__) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
#include <immintrin.h>
#endif

namespace kopt::Impl {

struct ExactSum {
  static constexpr int num_digits = 20;
  /// digit[k] has weight 2^(32 k + lsb_exponent).
  static constexpr int lsb_exponent = -298;
  static constexpr std::uint64_t low32 = 0xffffffffu;
  enum : std::uint32_t { saw_inf = 1, saw_nan = 2 };

  std::uint64_t digit[num_digits];
  std::uint32_t special;  ///< saw_inf / saw_nan: a non-finite value was added

  KOKKOS_INLINE_FUNCTION ExactSum() : digit{}, special(0) {}

  /// Adds x >= 0 (or +Inf, NaN). Bits of x below 2^-298 are dropped: there are none in
  /// sums of squares of floats. A value too large for the fixed point counts as +Inf.
  KOKKOS_INLINE_FUNCTION void add(double x) {
    if (!(x <= 1.7976931348623157e308)) {  // +Inf or NaN
      special |= x != x ? saw_nan : saw_inf;
      return;
    }
    if (!(x > 0.0)) return;
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const int biased = static_cast<int>(bits >> 52);  // x > 0: no sign bit
    std::uint64_t m = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    // x = m * 2^(biased - 1075): the position of m's lowest bit in the fixed point.
    int p = biased - 1075 - lsb_exponent;
    if (p < 0) {
      m = -p < 64 ? m >> -p : 0;
      p = 0;
    }
    const int k = p >> 5, s = p & 31;
    if (k + 2 >= num_digits) {
      special |= saw_inf;
      return;
    }
    const std::uint64_t shifted = m << s;  // bits 0..63 of m * 2^s (m < 2^53, s < 32)
    digit[k] += shifted & low32;
    digit[k + 1] += shifted >> 32;
    digit[k + 2] += s == 0 ? 0 : m >> (64 - s);
  }

  KOKKOS_INLINE_FUNCTION void join(const ExactSum& other) {
    for (int k = 0; k < num_digits; ++k) digit[k] += other.digit[k];
    special |= other.special;
  }

  /// Propagates carries: every digit but the last below 2^32 afterwards. The value is
  /// unchanged, and the digits are then a canonical form of it.
  KOKKOS_INLINE_FUNCTION void normalize() {
    for (int k = 0; k + 1 < num_digits; ++k) {
      digit[k + 1] += digit[k] >> 32;
      digit[k] &= low32;
    }
  }

  /// The sum rounded to the nearest double (ties to even); +Inf or NaN if such a value was
  /// added. Host only.
  double value() const;
};

/// Kokkos reducer joining ExactSums (team reductions on devices): digit-wise integer adds,
/// so any reduction tree gives the same digits.
template <class Space>
struct ExactSumReducer {
  using reducer = ExactSumReducer;
  using value_type = ExactSum;
  using result_view_type = Kokkos::View<value_type, Space, Kokkos::MemoryUnmanaged>;

  KOKKOS_INLINE_FUNCTION explicit ExactSumReducer(value_type& value) : value_(&value) {}
  KOKKOS_INLINE_FUNCTION void join(value_type& dest, const value_type& src) const {
    dest.join(src);
  }
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& dest,
                                   const volatile value_type& src) const {
    for (int k = 0; k < ExactSum::num_digits; ++k) dest.digit[k] = dest.digit[k] + src.digit[k];
    dest.special = dest.special | src.special;
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& value) const { value = ExactSum(); }
  KOKKOS_INLINE_FUNCTION value_type& reference() const { return *value_.data(); }
  KOKKOS_INLINE_FUNCTION result_view_type view() const { return value_; }
  KOKKOS_INLINE_FUNCTION bool references_scalar() const { return true; }

 private:
  result_view_type value_;
};

/// The grad norm's canonical block: `norm_block` consecutive elements of a param, starting
/// at a global offset that is a multiple of it. Each block's sum of squares is computed in
/// one fixed order (block_sum_of_squares) and added exactly: where a param is cut (a shard,
/// a chunk) never changes a block, so never the sum.
inline constexpr int norm_block = 64;

/// The sum of squares of one block, in double, in its fixed order: eight lanes, lane k
/// adding elements k, k + 8, ..., k + 56 in turn, then lanes k and k + 4, then k and k + 2,
/// then the last two. Each square of a float is exact in double. `v` holds the block's
/// values, zeros where the block has no element (after the end of a param).
KOKKOS_INLINE_FUNCTION double block_sum_of_squares_portable(const float* v) {
  double lane[8];
  for (int k = 0; k < 8; ++k) lane[k] = static_cast<double>(v[k]) * static_cast<double>(v[k]);
  for (int r = 1; r < 8; ++r)
    for (int k = 0; k < 8; ++k) {
      const double x = v[8 * r + k];
      lane[k] += x * x;
    }
  for (int k = 0; k < 4; ++k) lane[k] += lane[k + 4];
  for (int k = 0; k < 2; ++k) lane[k] += lane[k + 2];
  return lane[0] + lane[1];
}

/// block_sum_of_squares_portable, with the host's vector FMA where it has one.
KOKKOS_INLINE_FUNCTION double block_sum_of_squares(const float* v) {
#if defined(__AVX__) && defined(__FMA__) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
  // Lanes 0-3 and 4-7 as two vectors, the squares added by FMA: a float's square is exact
  // in double, so fma(x, x, s) rounds once, like x * x + s: the same bits, half the
  // instructions (the portable loops below take twice as long and bound the pass).
  __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(v)), hi = _mm256_cvtps_pd(_mm_loadu_ps(v + 4));
  lo = _mm256_mul_pd(lo, lo);
  hi = _mm256_mul_pd(hi, hi);
  for (int r = 1; r < 8; ++r) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(v + 8 * r));
    const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(v + 8 * r + 4));
    lo = _mm256_fmadd_pd(a, a, lo);
    hi = _mm256_fmadd_pd(b, b, hi);
  }
  double h[4];
  _mm256_storeu_pd(h, _mm256_add_pd(lo, hi));  // lanes k and k + 4
  return (h[0] + h[2]) + (h[1] + h[3]);
#else
  return block_sum_of_squares_portable(v);
#endif
}

}  // namespace kopt::Impl
