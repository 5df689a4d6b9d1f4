#pragma once
/// \file
/// paired_host_loop's vector loop (kopt/impl/paired_loop.hpp) where the policy gives
/// update_with (Adam): the 18- and 14-byte AdamW steps (the param kept through a remainder,
/// or rounded to nearest or stochastically; the bf16 state arrays rounded to nearest, or
/// stochastically for narrow_host_loop). Each element gets exactly fused_element's bits.
///
/// Written in lane vectors (kopt/impl/lanes.hpp) instead of left to the auto-vectorizer, so
/// that it can branch per vector: each vector of pairs runs the update unguarded, and only a
/// vector whose interpolations overflowed runs again, guarded, from its inputs read again
/// (nothing is stored before); the scalar paired loop had to copy every strip aside for that. Every
/// value stays a 32-bit lane (pairs split by shifts), where GCC's vectorization of the scalar
/// loop mixed 16- and 32-bit lanes and spent shuffles on every conversion; and with AVX-512
/// BF16 the state rounds with the CPU's conversion. One core of a 2-core AMD EPYC (Zen 5), in
/// cache: 1.58 G elements/s before, 2.65 after; the 18-byte step at 2^26 went from 0.91x to
/// 0.51x the 28-byte one's time (README, Precision-aware state).

#include <cstdint>
#include <cstring>
#include <kopt/adam_update.hpp>  // the guards: GuardEachElement, FlagOverflow
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <type_traits>

namespace kopt::Impl {

/// Whether the policy gives update_with (its math under a caller's guard).
template <class Policy, int V>
inline constexpr bool has_update_with = requires(float x, std::uint32_t& flag,
                                                 const typename Policy::Scalars& s) {
  Policy::template update_with<V>(x, x, x, x, x, s, FlagOverflow<std::uint32_t>{flag});
};

/// Whether paired_host_loop runs paired_lanes for a paired form.
template <class Policy, int V, class F>
inline constexpr bool lanes_form =
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    has_update_with<Policy, V>;
#else
    false;
#endif

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// A vector of pair words as floats: the even elements (low halves), the odd ones (high).
KOKKOS_FORCEINLINE_FUNCTION LaneF even_floats(LaneU w) { return bits_float(w << 16); }
KOKKOS_FORCEINLINE_FUNCTION LaneF odd_floats(LaneU w) { return bits_float(w & 0xffff0000u); }

/// Pair words from the even and odd elements' 16-bit results, each in its lane's low half (the
/// even one's high half zero, as the rounding functions leave it; the odd one's is shifted out).
KOKKOS_FORCEINLINE_FUNCTION LaneU pair_words(LaneU even, LaneU odd) { return even | odd << 16; }

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
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i words = _mm512_permutexvar_epi16(interleave, h);
    LaneU u;
    std::memcpy(&u, &words, sizeof u);
    return u;
  }
#endif
  return pair_words(bf16_nearest_bits(float_bits(even)), bf16_nearest_bits(float_bits(odd)));
}

/// Elements [begin, ...) in vectors of 2 * lane_count (lane_count pairs), as many as fit
/// before `end`; returns where it stopped. Each line of each stream is prefetched
/// update_prefetch_elements ahead. `StochasticState`: the bf16 state arrays are rounded
/// stochastically, each array's bits from r.of_array(k) (StateStorage::state_rounding; the
/// staged loop's bits, kopt/impl/narrow_state.hpp), else to nearest even.
template <class Policy, int V, class F, bool StochasticState = false>
KOPT_LOOP_FUNCTION std::int64_t paired_lanes(
    std::int64_t begin, std::int64_t end, bfloat16* KOPT_RESTRICT param,
    const bfloat16* KOPT_RESTRICT grad, typename F::MasterT* KOPT_RESTRICT master,
    typename F::StateT* KOPT_RESTRICT s0, typename F::StateT* KOPT_RESTRICT s1,
    typename F::StateT* KOPT_RESTRICT s2, const typename Policy::Scalars s, const ChunkRounding r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr bool remainder = std::is_same_v<typename F::MasterT, std::uint16_t>;
  constexpr std::int64_t step = 2 * lane_count;
  static_assert(32 % step == 0, "a line of a 16-bit stream is a whole number of steps");
  typename F::StateT* const arrays[3] = {s0, s1, s2};
  std::int64_t i = begin;
  for (; i + step <= end; i += step) {
    if (((i - begin) & 31) == 0)
      prefetch_update<Policy, V, true>(i, param, grad, master, s0, s1, s2);
    // The vector's update under `guard`, from memory (read again for a rerun: nothing is
    // stored before the flags are known, and rereading keeps fewer vectors live than a copy).
    const auto update = [&](const auto& guard, LaneF(&a)[3][2], LaneF(&out)[2]) {
      const LaneU pw = load_lanes(param + i), gw = load_lanes(grad + i);
      LaneF w[2];  // the masters (or params) of the even and the odd elements
      if constexpr (remainder) {
        const LaneU rw = load_lanes(master + i);
        w[0] = bits_float(join_master_bits(pw & 0xffffu, rw & 0xffffu));
        w[1] = bits_float(join_master_bits(pw >> 16, rw >> 16));
      } else {
        w[0] = even_floats(pw);
        w[1] = odd_floats(pw);
      }
      for (int k = 0; k < 3; ++k) {
        const LaneU sw = (kept >> k & 1u) != 0 ? load_lanes(arrays[k] + i) : LaneU{};
        a[k][0] = even_floats(sw);
        a[k][1] = odd_floats(sw);
      }
      out[0] = Policy::template update_with<V>(w[0], even_floats(gw), a[0][0], a[1][0], a[2][0], s,
                                               guard);
      out[1] = Policy::template update_with<V>(w[1], odd_floats(gw), a[0][1], a[1][1], a[2][1], s,
                                               guard);
    };
    LaneF a[3][2], out[2];
    LaneU flags{};
    update(FlagOverflow<LaneU>{flags}, a, out);
    if (any_top_bit(flags)) [[unlikely]]  // an interpolation overflowed: the guards decide
      update(GuardEachElement{}, a, out);
    if constexpr (remainder) {
      const LaneU x0 = float_bits(out[0]), x1 = float_bits(out[1]);
      store_lanes(param + i, pair_words(split_param_bits(x0), split_param_bits(x1)));
      store_lanes(master + i, pair_words(x0 & 0xffffu, x1));
    } else if constexpr (std::is_same_v<typename F::MasterT, RoundToNearest>) {
      store_lanes(param + i, bf16_nearest_pairs(out[0], out[1]));
    } else {
      store_lanes(param + i, pair_words(stochastic_lanes(float_bits(out[0]), r, i, 2, 0),
                                        stochastic_lanes(float_bits(out[1]), r, i, 2, 1)));
    }
    for (int k = 0; k < 3; ++k) {
      if ((kept >> k & 1u) == 0) continue;
      if constexpr (StochasticState) {
        const ChunkRounding rk = r.of_array(k);
        store_lanes(arrays[k] + i, pair_words(stochastic_lanes(float_bits(a[k][0]), rk, i, 2, 0),
                                              stochastic_lanes(float_bits(a[k][1]), rk, i, 2, 1)));
      } else {
        store_lanes(arrays[k] + i, bf16_nearest_pairs(a[k][0], a[k][1]));
      }
    }
  }
  return i;
}
#endif

}  // namespace kopt::Impl
