#pragma once
/// \file
/// q8 blocks (kopt/impl/block_q8.hpp) in the paired loop (kopt/impl/paired_lanes.hpp): where
/// params and grads are bf16 and no fp32 master is kept, each q8 array's block is decoded
/// into L1 scratch in the loop's order (each step's even elements, then its odd ones: codes
/// read as pair words, 32 widened to 16 bits each), updated there by paired_lanes, and
/// encoded from there once its largest magnitude is known, the even and odd codes packed back
/// into bytes in order. Every value and code is q8_lanes.hpp's, bitwise.
///
/// Why: q8_lanes_blocks runs fused_lanes, whose 16-bit streams each take shuffles to widen and
/// narrow: q8 m and v (with a remainder) ran 128 cycles per 32 elements on one Zen 5 core in
/// cache, where the 18-byte step runs 30; here 99, and 80 with q8_block_loop's decoding pass
/// and late encoding. In the suite, one core at 2^18: 0.99 -> 1.64 G elements/s; q8 m beside
/// an fp32 v 1.27 -> 2.06.

#include <cstdint>
#include <cstring>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/fused_lanes.hpp>  // LaneHalves
#include <kopt/impl/paired_arrays.hpp>
#include <kopt/impl/paired_lanes.hpp>
#include <kopt/impl/q8_block_loop.hpp>
#include <kopt/impl/q8_code_lanes.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
using LaneCodes = unsigned char __attribute__((vector_size(2 * lane_count)));
using LaneWords = std::uint16_t __attribute__((vector_size(4 * lane_count)));

/// 2 * lane_count codes as pair words: each widened to 16 bits, two to a lane.
KOKKOS_FORCEINLINE_FUNCTION LaneU load_code_pairs(const unsigned char* at) {
#if defined(__AVX512BW__)  // one widening load: GCC 12 made two and an insert of the conversion
  const __m512i w = _mm512_maskz_cvtepu8_epi16(
      ~__mmask32{0}, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  return lane_cast<LaneU>(w);
#else
  LaneCodes c;
  std::memcpy(&c, at, sizeof c);
  return lane_cast<LaneU>(__builtin_convertvector(c, LaneWords));
#endif
}

/// The even (a[0]) and odd (a[1]) elements' q8_decode<Root> of pair words of codes `w`
/// (scale: the block's). With F16C, a code is an f16 with fewer bits: its exponent (bias 15,
/// as an f16's) and mantissa moved into an f16's fields, subnormals included, so the CPU's
/// exact conversion decodes it; elsewhere q8_value_lanes' integer arithmetic.
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION void q8_decode_pairs(LaneU w, float scale, LaneF (&a)[2]) {
#ifdef KOPT_HAVE_F16C
  using Map = Q8Map<Root>;
  constexpr unsigned to_f16 = 10u - Map::mantissa;  // an f16 keeps 10 mantissa bits
  const LaneU h = Root ? w << to_f16 : ((w << to_f16) & 0x3f803f80u) | ((w << 8) & 0x80008000u);
  f16_pair_floats(h, a);
#else
  constexpr std::uint32_t magnitude = Root ? 0xffu : 0x7fu, sign = Root ? 0u : 0x80u;
  const LaneU code[2] = {w & 0xffu, w >> 16};
  for (int h = 0; h < 2; ++h)
    a[h] = bits_float(q8_value_lanes<Root>(code[h] & magnitude) | (code[h] & sign) << 24);
#endif
  for (int h = 0; h < 2; ++h) {
    a[h] = a[h] * scale;
    if constexpr (Root) a[h] = a[h] * a[h];
  }
}

/// Codes of the even and odd elements of two steps (e[s], o[s], one code per lane) stored in
/// element order as 4 * lane_count bytes.
KOKKOS_FORCEINLINE_FUNCTION void store_code_pairs(unsigned char* at, const LaneU (&e)[2],
                                                  const LaneU (&o)[2]) {
  for (int s = 0; s < 2; ++s) {
    const LaneU w = e[s] | o[s] << 8;  // each lane's low 16 bits: the pair's two bytes
    const LaneHalves h = __builtin_convertvector(w, LaneHalves);
    std::memcpy(at + s * 2 * lane_count, &h, sizeof h);
  }
}

/// paired_lanes' state arrays over one q8 block's elements [first, first + q8_block): a q8
/// array's values in `values` (q8_block floats each, each step's even elements then its odd
/// ones), read and updated there; the others (f32, or bf16 and f16 rounded to nearest) as
/// MixedPairs reads and writes them.
struct Q8Pairs {
  MixedPairs mixed;
  std::int64_t first;
  float* values[3];

  /// Whether every kept array of `d` is one Q8Pairs takes.
  static bool takes(const StateDTypes& d, unsigned kept) {
    for (int k = 0; k < 3; ++k)
      if ((kept >> k & 1u) != 0 && d.of[k] != DType::q8 && d.of[k] != DType::f32 &&
          (d.stochastic || (d.of[k] != DType::bf16 && d.of[k] != DType::f16)))
        return false;
    return true;
  }

  KOKKOS_FORCEINLINE_FUNCTION bool q8(int k) const { return mixed.d.of[k] == DType::q8; }
  KOKKOS_FORCEINLINE_FUNCTION void load(int k, std::int64_t i, LaneF (&a)[2]) const {
    if (!q8(k)) return mixed.load(k, i, a);
    const float* at = values[k] + (i - first);
    a[0] = bits_float(load_lanes(at));
    a[1] = bits_float(load_lanes(at + lane_count));
  }
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, const LaneF (&a)[2]) const {
    if (!q8(k)) return mixed.template store<Finite>(k, i, a);
    float* at = values[k] + (i - first);
    std::memcpy(at, &a[0], sizeof a[0]);
    std::memcpy(at + lane_count, &a[1], sizeof a[1]);
  }
  /// A q8 array's codes and scale ahead (the update reads its values from L1).
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    if (!q8(k)) return mixed.prefetch(k, i);
    prefetch_ahead(q8_block_of(mixed.at[k], i), i % q8_block);
  }
};

/// q8 blocks whose values are in Q8Pairs' order, for q8_block_loop: a block decoded, and its
/// codes from them (q8_encode_block's, bitwise).
struct Q8PairOrder {
  template <bool Root>
  KOKKOS_FORCEINLINE_FUNCTION static void decode(const unsigned char* KOPT_RESTRICT block,
                                                 float* KOPT_RESTRICT out) {
    const float scale = q8_scale_of(block);
    for (int j = 0; j < q8_block; j += 2 * lane_count) {
      LaneF a[2];
      q8_decode_pairs<Root>(load_code_pairs(block + j), scale, a);
      std::memcpy(out + j, &a[0], sizeof a[0]);
      std::memcpy(out + j + lane_count, &a[1], sizeof a[1]);
    }
  }
  /// The codes (inv: 1 / the block's scale), to nearest or (`Stochastic`) with the bits r
  /// gives elements i + j, as q8_encode_codes.
  template <bool Root, bool Stochastic>
  KOKKOS_FORCEINLINE_FUNCTION static void codes(const float* KOPT_RESTRICT in,
                                                unsigned char* KOPT_RESTRICT block, float inv,
                                                const ChunkRounding* r, std::int64_t i) {
    constexpr int step = 2 * lane_count;
    for (int j = 0; j < q8_block; j += 2 * step) {
      LaneU c[2][2];  // [step][even, odd]
      for (int s = 0; s < 2; ++s)
        for (int h = 0; h < 2; ++h) {
          const int at = j + s * step;
          const LaneF x = bits_float(load_lanes(in + at + h * lane_count));
          if constexpr (Stochastic)
            c[s][h] = q8_encode_lanes<Root, true>(
                x, inv, rounding_lanes(*r, i + at, 2, static_cast<std::uint32_t>(h)));
          else
            c[s][h] = q8_encode_lanes<Root>(x, inv);
        }
      store_code_pairs(block + j, {c[0][0], c[1][0]}, {c[0][1], c[1][1]});
    }
  }
};

/// narrow_host_loop's whole q8 blocks in [begin, end) (begin starts one) where Q8Pairs takes
/// the arrays: q8_block_loop in Q8Pairs' order, each block updated by paired_lanes. Returns
/// where it stopped (a param's last, partial block is left to the staging loop).
template <class Policy, int V, class F>
KOPT_LOOP_FUNCTION std::int64_t q8_paired_blocks(std::int64_t begin, std::int64_t end,
                                                 bfloat16* KOPT_RESTRICT param,
                                                 const bfloat16* KOPT_RESTRICT grad,
                                                 typename F::MasterT* KOPT_RESTRICT master,
                                                 void* const (&at)[3], const StateDTypes d,
                                                 const typename Policy::Scalars& s,
                                                 const ChunkRounding& r) {
  return q8_block_loop<Q8PairOrder>(
      begin, end, at, d, Policy::arrays_of(V), r, [&](std::int64_t i, float(&values)[3][q8_block]) {
        const Q8Pairs arrays{
            MixedPairs{{at[0], at[1], at[2]}, d}, i, {values[0], values[1], values[2]}};
        paired_lanes<Policy, V, F>(i, i + q8_block, param, grad, master, arrays, s, r);
      });
}
#endif

}  // namespace kopt::Impl
