#pragma once
/// \file
/// fp32 masters kept as a bf16 param and a 16-bit remainder (kopt/impl/param_remainder.hpp),
/// a vector of pair words at a time (kopt/impl/paired_words.hpp): join_master_bits of each
/// element from the param and remainder words, and split_param_bits with the remainder's
/// low halves back into words. The same bits as those functions, element by element.
///
/// With AVX-512 (BW, DQ) both work on the words as they are. The join's correction (the
/// param one less where its remainder is above 0x8000 and it is not NaN) is two 16-bit
/// compares and a masked 16-bit subtract on the param words, before they are split; the
/// split's NaN test is one classifying instruction per vector, and each word is put together
/// by a single ternary logic op. ~24 instructions where the generic lanes took ~40: with
/// LaneFlags and AdamW's g without the param, the 18-byte step went from 44 to 32 cycles per
/// 32 elements on a Zen 5 core, in cache. With AVX2 alone, the same correction in 16-bit
/// signed compares and each word put together by a 16-bit blend (blend_halves): with the
/// blends of the stores, kopt/impl/paired_lanes.hpp's 18-byte loop went from 146 to 130
/// instructions per 16 elements, and 1.23-1.30 to 1.50-1.60 G elements/s on a Zen 3 core.

#include <cstdint>
#include <cstring>
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/paired_words.hpp>
#include <kopt/impl/param_remainder.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
#if defined(__AVX512BW__) && defined(__AVX512DQ__)
/// vpternlogd's truth tables for a | (b & c) and a | (b & ~c). (The shifts below are the
/// masked forms, every lane: GCC 12 warns that the unmasked ones' undefined source may be
/// used.)
inline constexpr int a_or_b_and_c = 0xf8, a_or_b_and_not_c = 0xf4;
#endif

/// The masters of the elements whose params and remainders are the pair words `pw` and
/// `rw`: w[0] the even elements', w[1] the odd ones'.
KOKKOS_FORCEINLINE_FUNCTION void join_master_pairs(LaneU pw, LaneU rw, LaneF (&w)[2]) {
#if defined(__AVX512BW__) && defined(__AVX512DQ__)
  const __m512i p = lane_cast<__m512i>(pw), r = lane_cast<__m512i>(rw);
  const __mmask32 up = _mm512_cmpgt_epu16_mask(r, _mm512_set1_epi16(static_cast<short>(0x8000)));
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(p, _mm512_set1_epi16(0x7fff)),
                                                _mm512_set1_epi16(0x7f80));
  const __m512i q = _mm512_mask_sub_epi16(p, _kandn_mask32(nan, up), p, _mm512_set1_epi16(1));
  const __m512i low = _mm512_set1_epi32(0xffff);
  w[0] = bits_float(lane_cast<LaneU>(
      _mm512_ternarylogic_epi32(_mm512_maskz_slli_epi32(0xffff, q, 16), r, low, a_or_b_and_c)));
  w[1] = bits_float(lane_cast<LaneU>(
      _mm512_ternarylogic_epi32(_mm512_maskz_srli_epi32(0xffff, r, 16), q, low, a_or_b_and_not_c)));
#elif defined(__AVX2__) && !defined(__AVX512F__)
  // The same correction in 16-bit lanes, signed: r > 0x8000 is r ^ 0x8000 > 0, and the
  // magnitude bits of p (at most 0x7fff) compare as they are; the mask of all ones where
  // both hold is the -1 added to p. Ten ops for both halves where the 32-bit lanes took ~22.
  const __m256i p = lane_cast<__m256i>(pw), r = lane_cast<__m256i>(rw);
  const __m256i up =
      _mm256_cmpgt_epi16(_mm256_xor_si256(r, _mm256_set1_epi16(INT16_MIN)), _mm256_setzero_si256());
  const __m256i nan =
      _mm256_cmpgt_epi16(_mm256_and_si256(p, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7f80));
  const LaneU q = lane_cast<LaneU>(_mm256_add_epi16(p, _mm256_andnot_si256(nan, up)));
  w[0] = bits_float(blend_halves(rw, q << 16));
  w[1] = bits_float(blend_halves(rw >> 16, q));
#else
  w[0] = bits_float(join_master_bits(pw & 0xffffu, rw & 0xffffu));
  w[1] = bits_float(join_master_bits(pw >> 16, rw >> 16));
#endif
}

/// The param and remainder pair words of masters `w` (w[0] the even elements', w[1] the odd
/// ones'): split_param_bits and the low halves.
KOKKOS_FORCEINLINE_FUNCTION void split_master_pairs(const LaneF (&w)[2], LaneU& pw, LaneU& rw) {
#if defined(__AVX512BW__) && defined(__AVX512DQ__)
  const __m512 f[2] = {lane_cast<__m512>(w[0]), lane_cast<__m512>(w[1])};
  __m512i x[2], y[2];
  constexpr int nan = 0x01 | 0x80;  // QNaN, SNaN
  for (int h = 0; h < 2; ++h) {
    x[h] = _mm512_castps_si512(f[h]);
    y[h] = _mm512_mask_or_epi32(_mm512_add_epi32(x[h], _mm512_set1_epi32(0x7fff)),
                                _mm512_fpclass_ps_mask(f[h], nan), x[h],
                                _mm512_set1_epi32(0x00400000));
  }
  const __m512i low = _mm512_set1_epi32(0xffff);
  pw = lane_cast<LaneU>(_mm512_ternarylogic_epi32(_mm512_maskz_srli_epi32(0xffff, y[0], 16), y[1],
                                                  low, a_or_b_and_not_c));
  rw = lane_cast<LaneU>(_mm512_ternarylogic_epi32(_mm512_maskz_slli_epi32(0xffff, x[1], 16), x[0],
                                                  low, a_or_b_and_c));
#else
  const LaneU x0 = float_bits(w[0]), x1 = float_bits(w[1]);
  pw = pair_words(split_param_bits(x0), split_param_bits(x1));
  rw = pair_words(x0 & 0xffffu, x1);
#endif
}

/// split_master_pairs of masters none of which is NaN (paired_lanes' stores where its flags
/// show every value finite): split_param_bits without its NaN test.
KOKKOS_FORCEINLINE_FUNCTION void split_finite_master_pairs(const LaneF (&w)[2], LaneU& pw,
                                                           LaneU& rw) {
  const LaneU x0 = float_bits(w[0]), x1 = float_bits(w[1]);
  pw = blend_halves((x0 + 0x7fffu) >> 16, x1 + 0x7fffu);
  rw = blend_halves(x0, x1 << 16);
}
#endif

}  // namespace kopt::Impl
