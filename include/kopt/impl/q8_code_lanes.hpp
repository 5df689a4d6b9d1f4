#pragma once
/// \file
/// q8 codes (kopt/impl/block_q8.hpp) decoded and encoded a lane vector at a time, for the
/// host's update of Adam's q8 moments (kopt/impl/q8_lanes.hpp). Each value and code is
/// bitwise Q8Map's, to nearest and stochastically (tests/test_q8_lanes.cpp: every code at
/// every scale, and codes of floats of every exponent).
///
/// Why: staged through scratch by q8_decode_run and q8_encode_run, which GCC vectorizes
/// byte by byte (a code's bits widened 8 -> 16 -> 32 in several shuffles), the 14-byte step
/// ran 0.94 G elements/s on one core of a 2-core AMD EPYC (Zen 5) in cache, a third of the
/// 18-byte step's rate: decoding and encoding took 60% of it. Here a subnormal code decodes
/// by an exact conversion of its mantissa to float, where Q8Map::value finds its leading
/// bit; a normal code is its bits shifted into the float's; and the codes are packed into
/// bytes by AVX-512's packs: 1.16 G elements/s. What is left is arithmetic spread over the
/// whole step: encoding v from the root Adam's update takes (one square root fewer) measured
/// within noise, so the encoder takes its own (README, precision-aware state).

#include <bit>
#include <cstdint>
#include <cstring>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/paired_lanes.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
using LaneI = std::int32_t __attribute__((vector_size(lane_bytes)));
using LaneBytes = unsigned char __attribute__((vector_size(lane_count)));

/// lane_count codes, each widened to a lane.
KOKKOS_FORCEINLINE_FUNCTION LaneU load_code_lanes(const unsigned char* at) {
  LaneU u;
#if defined(__AVX512F__)
  const __m512i w =
      _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  std::memcpy(&u, &w, sizeof u);
#elif defined(__AVX2__)
  const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at)));
  std::memcpy(&u, &w, sizeof u);
#else
  LaneBytes b;
  std::memcpy(&b, at, sizeof b);
  u = __builtin_convertvector(b, LaneU);
#endif
  return u;
}

/// Each lane of `select` all ones or all zeros: `yes` where it is set, `no` elsewhere (a
/// blend under a mask with AVX-512; and-not-or, three ops, where written with bit masks).
KOKKOS_FORCEINLINE_FUNCTION LaneU pick(LaneI select, LaneU yes, LaneU no) {
  return select ? yes : no;
}

/// Q8Map<Root>::value_bits of each lane's magnitude code c (at most 2^(4 + mantissa)).
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION LaneU q8_value_lanes(LaneU c) {
  using Map = Q8Map<Root>;
  // A normal code: its exponent and mantissa bits in the float's, the exponent rebiased.
  const LaneU normal = (c << Map::drop) + (112u << 23);
  // A subnormal one, f x 2^-(14 + mantissa): f's conversion, exact, scaled by a power of 2.
  constexpr float step = 1.0f / static_cast<float>(1u << (14u + Map::mantissa));
  const LaneF sub = __builtin_convertvector(std::bit_cast<LaneI>(c), LaneF) * step;
  return pick(c >= (1u << Map::mantissa), normal, float_bits(sub));
}

/// q8_decode<Root> of each lane's code (scale: the block's).
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION LaneF q8_decode_lanes(LaneU code, float scale) {
  const LaneU bits = q8_value_lanes<Root>(code & (Root ? 0xffu : 0x7fu));
  if constexpr (Root) {
    const LaneF r = bits_float(bits) * scale;
    return r * r;
  } else {
    return bits_float(bits | ((code & 0x80u) << 24)) * scale;
  }
}

/// Q8Map<Root>::code of each lane of y >= 0: the same expression, lane by lane.
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION LaneU q8_code_lanes(LaneF y) {
  using Map = Q8Map<Root>;
  const LaneU ay = float_bits(y) & 0x7fffffffu;
  constexpr std::uint32_t half = 1u << (Map::drop - 1u);
  const LaneU norm =
      ((ay + (half - 1u) + ((ay >> Map::drop) & 1u)) >> Map::drop) - (112u << Map::mantissa);
  constexpr float magic = static_cast<float>(1u << (9u - Map::mantissa));
  const LaneU sub = float_bits(bits_float(ay) + magic) - float_bits(magic);
  const LaneU c = pick(ay < 0x38800000u, sub, norm);
  return c > Map::top ? LaneU{} + Map::top : c;
}

/// Q8Map<Root>::code_stochastic of each lane of y with its 16 random bits: the same
/// expressions, lane by lane (the truncating conversion exact: below 2^mantissa).
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION LaneU q8_code_lanes_stochastic(LaneF x, LaneU bits) {
  using Map = Q8Map<Root>;
  const LaneU ay = float_bits(x) & 0x7fffffffu;
  const LaneF y = bits_float(ay);
  const LaneI tiny = ay < 0x38800000u;
  const LaneU norm = (ay >> Map::drop) - (112u << Map::mantissa);
  constexpr float per_step = static_cast<float>(1u << (14u + Map::mantissa));
  const LaneF below = bits_float(pick(tiny, ay, LaneU{})) * per_step;
  const LaneU sub = std::bit_cast<LaneU>(__builtin_convertvector(below, LaneI));
  LaneU c = pick(tiny, sub, norm);
  c = c > Map::top ? LaneU{} + Map::top : c;
  LaneU threshold;
  if constexpr (Root) {
    const LaneF lo = bits_float(q8_value_lanes<Root>(c)),
                hi = bits_float(q8_value_lanes<Root>(c + 1u));
    const LaneF t = (y * y - lo * lo) / (hi * hi - lo * lo);
    const LaneF scaled = t * 65536.0f;
    const LaneF kept =
        bits_float(pick(scaled < 65536.0f, float_bits(scaled), LaneU{} + 0x47800000u));
    threshold =
        pick(scaled > 0.0f, std::bit_cast<LaneU>(__builtin_convertvector(kept, LaneI)), LaneU{});
  } else {
    // The codes' spacing is a power of two, so the map's (y - lo) / (hi - lo) is exact: the
    // dropped mantissa bits (normal codes) or y's fraction of a subnormal step, whose top 16
    // bits are its threshold, with no division. (Where c was cut to `top`, y is past the
    // largest code and every threshold ends at `top` below.)
    const LaneU normal_t = (ay >> (Map::drop - 16u)) & 0xffffu;
    const LaneF fraction = below - __builtin_convertvector(std::bit_cast<LaneI>(sub), LaneF);
    const LaneU sub_t = std::bit_cast<LaneU>(__builtin_convertvector(fraction * 65536.0f, LaneI));
    threshold = pick(tiny, sub_t, normal_t);
  }
  c += pick(bits < threshold, LaneU{} + 1u, LaneU{});
  return c > Map::top ? LaneU{} + Map::top : c;
}

/// q8_encode<Root> of each lane (inv: 1 / the block's scale), or q8_encode_stochastic with
/// the lanes' bits `bits` (`Stochastic`).
template <bool Root, bool Stochastic = false>
KOKKOS_FORCEINLINE_FUNCTION LaneU q8_encode_lanes(LaneF x, float inv, LaneU bits = LaneU{}) {
  const auto code = [&](LaneF y) {
    if constexpr (Stochastic) return q8_code_lanes_stochastic<Root>(y, bits);
    return q8_code_lanes<Root>(y);
  };
  if constexpr (Root) {
    const LaneF y = bits_float(pick(x < 0.0f, LaneU{}, float_bits(x)));
    return code(sqrt_rn(y) * inv);
  } else {
    return ((float_bits(x) >> 24) & 0x80u) | code(x * inv);
  }
}

/// Codes of 4 lane vectors stored as 4 x lane_count bytes, by two saturating packs and a
/// permute. AVX-512's narrowing stores (vpmovdb to memory, which GCC makes of a conversion
/// and a store) cost the block's encoding a third of its time on Zen 5; without AVX-512,
/// GCC packed the conversion's bytes one by one (an extract, a shift and an or each).
KOKKOS_FORCEINLINE_FUNCTION void store_code_lanes(unsigned char* at, const LaneU (&c)[4]) {
#if defined(__AVX512BW__)
  __m512i v[4];
  std::memcpy(v, c, sizeof v);
  // Each 128-bit lane L of the packs holds dwords 4L..4L+3 of c[0], c[1], c[2], c[3].
  const __m512i packed =
      _mm512_packus_epi16(_mm512_packus_epi32(v[0], v[1]), _mm512_packus_epi32(v[2], v[3]));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  _mm512_storeu_si512(at, _mm512_maskz_permutexvar_epi32(0xffff, order, packed));
#elif defined(__AVX2__) && !defined(__AVX512F__)  // lanes of 8
  __m256i v[4];
  std::memcpy(v, c, sizeof v);
  // Each 128-bit half H of the packs holds dwords 4H..4H+3 of c[0], c[1], c[2], c[3].
  const __m256i packed =
      _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), _mm256_permutevar8x32_epi32(packed, order));
#else
  for (int q = 0; q < 4; ++q) {
    const LaneBytes b = __builtin_convertvector(c[q], LaneBytes);
    std::memcpy(at + q * lane_count, &b, sizeof b);
  }
#endif
}

/// A block's codes from its values (inv: 1 / its scale), to nearest or (`Stochastic`) with
/// the bits r gives elements i + j: a loop of its own for each, so the nearest one's body
/// holds no test.
template <bool Root, bool Stochastic>
KOKKOS_FORCEINLINE_FUNCTION void q8_encode_codes(const float* KOPT_RESTRICT in,
                                                 unsigned char* KOPT_RESTRICT block, float inv,
                                                 const ChunkRounding* r, std::int64_t i) {
  for (int j = 0; j < q8_block; j += 4 * lane_count) {
    LaneU c[4];
    for (int q = 0; q < 4; ++q) {
      const LaneF x = bits_float(load_lanes(in + j + q * lane_count));
      if constexpr (Stochastic)
        c[q] =
            q8_encode_lanes<Root, true>(x, inv, rounding_lanes(*r, i + j + q * lane_count, 1, 0));
      else
        c[q] = q8_encode_lanes<Root>(x, inv);
    }
    store_code_lanes(block + j, c);
  }
}

/// 1 / a block's scale (a power of two from 2^-126 to 2^127, or NaN), exactly, without a
/// division: its exponent negated (2^127's inverse a subnormal). The division's latency
/// delayed each block's encoding.
KOKKOS_FORCEINLINE_FUNCTION float q8_inverse_scale(float scale) {
  const std::uint32_t e = float_bits(scale) >> 23;
  return e >= 255u ? scale : bits_float(e == 254u ? 0x00400000u : (254u - e) << 23);
}

/// The bits of the largest magnitude of a block's values (in any order): bit patterns of
/// magnitudes order as the values, NaN above Inf.
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t q8_block_top(const float* in) {
  LaneU tops[4] = {};  // four chains, not one: the block's encoding waits for this
  for (int j = 0; j < q8_block; j += 4 * lane_count)
    for (int q = 0; q < 4; ++q) {
      const LaneU a = load_lanes(in + j + q * lane_count) & 0x7fffffffu;
      tops[q] = a > tops[q] ? a : tops[q];
    }
  const LaneU t01 = tops[0] > tops[1] ? tops[0] : tops[1];
  const LaneU t23 = tops[2] > tops[3] ? tops[2] : tops[3];
  const LaneU top = t01 > t23 ? t01 : t23;
  std::uint32_t amax = 0;
  for (int l = 0; l < lane_count; ++l) amax = top[l] > amax ? top[l] : amax;
  return amax;
}

/// q8 blocks whose values are in element order (q8_lanes_blocks), for q8_block_loop: a
/// block decoded into q8_block floats, and its codes from them (q8_encode_codes).
struct Q8ElementOrder {
  template <bool Root>
  KOKKOS_FORCEINLINE_FUNCTION static void decode(const unsigned char* KOPT_RESTRICT block,
                                                 float* KOPT_RESTRICT out) {
    const float scale = q8_scale_of(block);
    for (int j = 0; j < q8_block; j += lane_count)
      store_lanes(out + j, float_bits(q8_decode_lanes<Root>(load_code_lanes(block + j), scale)));
  }
  template <bool Root, bool Stochastic>
  KOKKOS_FORCEINLINE_FUNCTION static void codes(const float* KOPT_RESTRICT in,
                                                unsigned char* KOPT_RESTRICT block, float inv,
                                                const ChunkRounding* r, std::int64_t i) {
    q8_encode_codes<Root, Stochastic>(in, block, inv, r, i);
  }
};

/// A block's codes from its values in Order's order with its scale known, to nearest or (r
/// not null: the array's rounding) stochastically with the bits of elements i + j, and the
/// scale after them.
template <class Order, bool Root>
KOPT_LOOP_FUNCTION void q8_encode_scaled(const float* KOPT_RESTRICT in,
                                         unsigned char* KOPT_RESTRICT block, float scale,
                                         const ChunkRounding* r, std::int64_t i) {
  static_assert(q8_block % (4 * lane_count) == 0);
  const float inv = q8_inverse_scale(scale);
  if (r == nullptr)
    Order::template codes<Root, false>(in, block, inv, r, i);
  else
    Order::template codes<Root, true>(in, block, inv, r, i);
  std::memcpy(block + q8_block, &scale, sizeof scale);
}

/// q8_encode_run<Root>(in, block, q8_block, r, i): a whole block from its values.
template <bool Root>
KOPT_LOOP_FUNCTION void q8_encode_block(const float* KOPT_RESTRICT in,
                                        unsigned char* KOPT_RESTRICT block,
                                        const ChunkRounding* r = nullptr, std::int64_t i = 0) {
  q8_encode_scaled<Q8ElementOrder, Root>(in, block, q8_scale<Root>(q8_block_top(in)), r, i);
}
#endif

}  // namespace kopt::Impl
