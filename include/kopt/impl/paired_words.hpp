#pragma once
/// \file
/// Pair words: two 16-bit elements of a stream read as one 32-bit lane, the even element in
/// its low half (kopt/impl/paired_lanes.hpp). Their halves as floats and back, rounded to
/// nearest or stochastically, for bf16 and f16; and an fp32 stream's elements split the same
/// way (even and odd) and joined again, so that an fp32 array can sit beside 16-bit ones.

#include <cstdint>
#include <cstring>
#include <kopt/impl/f16_blocks.hpp>  // KOPT_HAVE_F16C
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <kopt/storage_types.hpp>
#include <utility>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// A vector of pair words as floats: the even elements (low halves), the odd ones (high).
KOKKOS_FORCEINLINE_FUNCTION LaneF even_floats(LaneU w) { return bits_float(w << 16); }
KOKKOS_FORCEINLINE_FUNCTION LaneF odd_floats(LaneU w) { return bits_float(w & 0xffff0000u); }

/// bf16 pair words `w` as floats: out[0] the even elements, out[1] the odd ones.
KOKKOS_FORCEINLINE_FUNCTION void bf16_pair_floats(LaneU w, LaneF (&out)[2]) {
  out[0] = even_floats(w);
  out[1] = odd_floats(w);
}

/// Pair words from the even and odd elements' 16-bit results, each in its lane's low half (the
/// even one's high half zero, as the rounding functions leave it; the odd one's is shifted out).
KOKKOS_FORCEINLINE_FUNCTION LaneU pair_words(LaneU even, LaneU odd) { return even | odd << 16; }

/// Pair words of the low halves of `low` and the high halves of `high`: with AVX2 (and no
/// AVX-512, whose ternary logic does it in one op too) a single 16-bit blend, where masking
/// both and or-ing them took three ops and a register for each mask.
KOKKOS_FORCEINLINE_FUNCTION LaneU blend_halves(LaneU low, LaneU high) {
#if defined(__AVX2__) && !defined(__AVX512F__)
  return lane_cast<LaneU>(
      _mm256_blend_epi16(lane_cast<__m256i>(low), lane_cast<__m256i>(high), 0xaa));
#else
  return (low & 0xffffu) | (high & 0xffff0000u);
#endif
}

/// The random bits of elements r.first + i + stride * l + offset, l the lane: their global
/// indices split into 32-bit halves, the high one carried where a low one wrapped.
KOKKOS_FORCEINLINE_FUNCTION LaneU rounding_lanes(const ChunkRounding& r, std::int64_t i,
                                                 std::uint32_t stride, std::uint32_t offset) {
  // rounding_hash's sum, with its products taken once per vector (mod 2^32, the same bits):
  // low * factor is the vector's base times it plus each lane's offset times it, and the
  // high word's term takes one of two values, by whether the lane's low word wrapped.
  const auto base = static_cast<std::uint64_t>(r.first + i);
  const auto base_low = static_cast<std::uint32_t>(base);
  const auto base_high = static_cast<std::uint32_t>(base >> 32);
  LaneU lane_offset;
  for (int l = 0; l < lane_count; ++l)
    lane_offset[l] = stride * static_cast<std::uint32_t>(l) + offset;
  const LaneU low = base_low + lane_offset;
  const std::uint32_t same = (base_high + r.key.high) * rounding_high_factor;
  const std::uint32_t carried = (base_high + 1u + r.key.high) * rounding_high_factor;
  const LaneU high_term = low < base_low ? LaneU{} + carried : LaneU{} + same;
  const LaneU low_term = base_low * rounding_low_factor + lane_offset * rounding_low_factor;
  return rounding_mix(LaneU(r.key.low ^ low_term ^ high_term));
}

/// stochastic_bf16_bits of lanes `x` (float bits) with rounding_lanes' bits.
KOKKOS_FORCEINLINE_FUNCTION LaneU stochastic_lanes(LaneU x, const ChunkRounding& r, std::int64_t i,
                                                   std::uint32_t stride, std::uint32_t offset) {
  return stochastic_bf16_bits(x, rounding_lanes(r, i, stride, offset));
}

#if defined(__AVX512BW__)
/// vpermw's indices that put 32 halves [the even elements' 16 | the odd ones'] into pair
/// words (interleave), and pair words into [even | odd] (deinterleave).
KOKKOS_FORCEINLINE_FUNCTION __m512i interleave_halves() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                          6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
}
KOKKOS_FORCEINLINE_FUNCTION __m512i deinterleave_halves() {
  return _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1, 30, 28, 26, 24,
                          22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
}
#endif

/// The pair words of bf16_nearest_bits of the even and the odd elements' floats.
KOKKOS_FORCEINLINE_FUNCTION LaneU bf16_nearest_pairs(LaneF even, LaneF odd) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
  // The CPU's conversion rounds to nearest even and quiets NaN as bf16_nearest_bits does,
  // but reads subnormal floats as zero (checked against every float on a Zen 5): a vector
  // with one takes the integer rounding. Two conversions where the integer one took ~16
  // instructions, a tenth of the 18-byte step's loop.
  __m512 e, o;
  std::memcpy(&e, &even, sizeof e);
  std::memcpy(&o, &odd, sizeof o);
  constexpr int subnormal = 0x20;
  if (_kortestz_mask16_u8(_mm512_fpclass_ps_mask(e, subnormal),
                          _mm512_fpclass_ps_mask(o, subnormal))) {
    const __m512bh halves = _mm512_cvtne2ps_pbh(o, e);  // the even elements', then the odd
    __m512i h;
    std::memcpy(&h, &halves, sizeof h);
    const __m512i words = _mm512_permutexvar_epi16(interleave_halves(), h);
    LaneU u;
    std::memcpy(&u, &words, sizeof u);
    return u;
  }
#endif
  return pair_words(bf16_nearest_bits(float_bits(even)), bf16_nearest_bits(float_bits(odd)));
}

/// Whether bf16 stores round with the CPU's conversion (AVX-512 BF16), which quiets NaN
/// itself: their finite forms are then the same, and nothing need be flagged for them.
inline constexpr bool bf16_conversion_stores =
#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512DQ__)
    true;
#else
    false;
#endif

/// bf16_nearest_pairs of floats none of which is NaN: bf16_nearest_bits without its NaN
/// test, each odd element's result left where it lands, in its word's high half. The paired
/// loop's stores where its flags show every value finite (paired_lanes): the tests and
/// selects for NaN had taken a fifth of the 18-byte step's instructions without AVX-512 BF16.
/// (With it, the CPU's conversion: the integer rounding ran 2-3% slower there.)
KOKKOS_FORCEINLINE_FUNCTION LaneU bf16_finite_pairs(LaneF even, LaneF odd) {
  if constexpr (bf16_conversion_stores) return bf16_nearest_pairs(even, odd);
  return blend_halves(bf16_rounded_up(float_bits(even)) >> 16, bf16_rounded_up(float_bits(odd)));
}

/// The even and the odd elements of f16 pair words `w` as floats (float16::to_float's bits:
/// F16C's conversion where the CPU has it, as kopt/impl/narrow_lanes.hpp reads f16 arrays).
KOKKOS_FORCEINLINE_FUNCTION void f16_pair_floats(LaneU w, LaneF (&out)[2]) {
#if defined(KOPT_HAVE_F16C) && defined(__AVX512BW__)
  // One permute puts the even halves before the odd ones; each 256-bit half converts as it
  // is. (Two truncating moves and a shift before: with the store's mirror image below, the
  // f16 step 4% faster on a Zen 5 core in cache, 3.2 -> 3.3 G elements/s.)
  __m512i v;
  std::memcpy(&v, &w, sizeof v);
  const __m512i h = _mm512_permutexvar_epi16(deinterleave_halves(), v);
  const __m512 e = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                        _mm512_maskz_extracti64x4_epi64(0xff, h, 0)),
               o = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                        _mm512_maskz_extracti64x4_epi64(0xff, h, 1));
  std::memcpy(&out[0], &e, sizeof e);
  std::memcpy(&out[1], &o, sizeof o);
#elif defined(KOPT_HAVE_F16C) && defined(__AVX512F__)
  // (Masked forms: GCC 12 warns that the unmasked ones' undefined source may be used.)
  __m512i v;
  std::memcpy(&v, &w, sizeof v);
  const __m256i even = _mm512_maskz_cvtepi32_epi16(0xffff, v);  // each word's low half
  const __m256i odd = _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, v, 16));
  const __m512 e = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff, even),
               o = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff, odd);
  std::memcpy(&out[0], &e, sizeof e);
  std::memcpy(&out[1], &o, sizeof o);
#elif defined(KOPT_HAVE_F16C) && defined(__AVX2__)
  __m256i v;
  std::memcpy(&v, &w, sizeof v);
  // packus keeps each 16-bit value (none saturates): per 128-bit half, 4 even then 4 odd;
  // the permute puts the 8 even halves first.
  const __m256i packed = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(v, 16)),
      0xd8);
  const __m256 e = _mm256_cvtph_ps(_mm256_castsi256_si128(packed)),
               o = _mm256_cvtph_ps(_mm256_extracti128_si256(packed, 1));
  std::memcpy(&out[0], &e, sizeof e);
  std::memcpy(&out[1], &o, sizeof o);
#else
  for (int l = 0; l < lane_count; ++l) {
    out[0][l] = float16{static_cast<std::uint16_t>(w[l] & 0xffffu)}.to_float();
    out[1][l] = float16{static_cast<std::uint16_t>(w[l] >> 16)}.to_float();
  }
#endif
}

/// The f16 pair words of float16::from_float of the even and the odd elements' floats.
KOKKOS_FORCEINLINE_FUNCTION LaneU f16_nearest_pairs(LaneF even, LaneF odd) {
  LaneU u;
#if defined(KOPT_HAVE_F16C)
  constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(KOPT_HAVE_F16C) && defined(__AVX512BW__)
  __m512 e, o;
  std::memcpy(&e, &even, sizeof e);
  std::memcpy(&o, &odd, sizeof o);
  const __m256i he = _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, e, nearest),
                ho = _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, o, nearest);
  const __m512i h = _mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(he), ho, 1);
  const __m512i words = _mm512_permutexvar_epi16(interleave_halves(), h);
  std::memcpy(&u, &words, sizeof u);
#elif defined(KOPT_HAVE_F16C) && defined(__AVX512F__)
  __m512 e, o;
  std::memcpy(&e, &even, sizeof e);
  std::memcpy(&o, &odd, sizeof o);
  const __m512i lo = _mm512_maskz_cvtepu16_epi32(
                    0xffff, _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, e, nearest)),
                hi = _mm512_maskz_cvtepu16_epi32(
                    0xffff, _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, o, nearest));
  const __m512i words = _mm512_or_si512(lo, _mm512_maskz_slli_epi32(0xffff, hi, 16));
  std::memcpy(&u, &words, sizeof u);
#elif defined(KOPT_HAVE_F16C) && defined(__AVX2__)
  __m256 e, o;
  std::memcpy(&e, &even, sizeof e);
  std::memcpy(&o, &odd, sizeof o);
  const __m128i lo = _mm256_cvtps_ph(e, nearest), hi = _mm256_cvtps_ph(o, nearest);
  const __m256i words = _mm256_set_m128i(_mm_unpackhi_epi16(lo, hi), _mm_unpacklo_epi16(lo, hi));
  std::memcpy(&u, &words, sizeof u);
#else
  for (int l = 0; l < lane_count; ++l)
    u[l] = std::uint32_t{float16::from_float(even[l]).bits} |
           std::uint32_t{float16::from_float(odd[l]).bits} << 16;
#endif
  return u;
}

/// 2 * lane_count fp32 elements from `at`: out[0] the even ones, out[1] the odd ones.
KOKKOS_FORCEINLINE_FUNCTION void f32_pair_floats(const float* at, LaneF (&out)[2]) {
  LaneF x0, x1;
  std::memcpy(&x0, at, sizeof x0);
  std::memcpy(&x1, at + lane_count, sizeof x1);
  [&]<std::size_t... L>(std::index_sequence<L...>) {
    out[0] = __builtin_shufflevector(x0, x1, static_cast<int>(2 * L)...);
    out[1] = __builtin_shufflevector(x0, x1, static_cast<int>(2 * L + 1)...);
  }
  (std::make_index_sequence<lane_count>{});
}

/// The even and the odd elements' floats stored in order at `at` (2 * lane_count of them).
KOKKOS_FORCEINLINE_FUNCTION void store_f32_pairs(float* at, LaneF even, LaneF odd) {
  constexpr int n = lane_count;
  LaneF x0, x1;  // element j of the pair: the even one's j / 2 or the odd one's
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    x0 = __builtin_shufflevector(even, odd, static_cast<int>(J % 2 * n + J / 2)...);
    x1 = __builtin_shufflevector(even, odd, static_cast<int>(J % 2 * n + J / 2 + n / 2)...);
  }
  (std::make_index_sequence<n>{});
  std::memcpy(at, &x0, sizeof x0);
  std::memcpy(at + n, &x1, sizeof x1);
}
#endif

}  // namespace kopt::Impl
