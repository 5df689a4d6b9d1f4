#pragma once
/// \file
/// paired_host_loop's vector loop (kopt/impl/paired_loop.hpp) where the policy gives
/// update_with (Adam): the 18- and 14-byte AdamW steps (the param kept through a remainder,
/// or rounded to nearest or stochastically; the bf16 state arrays rounded to nearest, or
/// stochastically for narrow_host_loop), and narrow_host_loop's arrays of mixed dtypes, bf16,
/// f16 or f32 (kopt/impl/paired_arrays.hpp). Each element gets exactly fused_element's bits.
///
/// Written in lane vectors (kopt/impl/lanes.hpp) instead of left to the auto-vectorizer, so
/// that it can branch per vector: each vector of pairs runs the update unguarded, and only a
/// vector whose interpolations overflowed runs again, guarded, from its inputs read again
/// (nothing is stored before); the scalar paired loop had to copy every strip aside for that. Every
/// value stays a 32-bit lane (pairs split by shifts), where GCC's vectorization of the scalar
/// loop mixed 16- and 32-bit lanes and spent shuffles on every conversion; and with AVX-512
/// BF16 the state rounds with the CPU's conversion. One core of a 2-core AMD EPYC (Zen 5), in
/// cache: 1.58 G elements/s before, 2.65 after; the 18-byte step at 2^26 went from 0.91x to
/// 0.51x the 28-byte one's time (README, Precision-aware state). A vector whose flags stay
/// clear also stores no NaN (the param and the arrays the guard does not pass are flagged
/// too), so its roundings to nearest by integer ops take no NaN test: without AVX-512 BF16
/// those tests were a fifth of the step's instructions (one Zen 5 core in cache, the 18-byte
/// step: AVX2 code 95 -> 75 cycles per 32 elements, AVX-512 code without BF16 35 -> 28; with
/// it the CPU's conversion, which quiets NaN itself, still rounds the bf16 arrays).

#include <cstdint>
#include <cstring>
#include <kopt/adam_update.hpp>  // the guards: GuardEachElement, FlagOverflow
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/paired_arrays.hpp>
#include <kopt/impl/remainder_pairs.hpp>
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
/// The state arrays whose new values the policy's update_with passes through its guard
/// (Policy::guarded_arrays; none where it does not say).
template <class Policy>
inline constexpr unsigned guarded_arrays_of = [] {
  if constexpr (requires { Policy::guarded_arrays; })
    return Policy::guarded_arrays;
  else
    return 0u;
}();

/// The lane loops' prefetch at element i: the param, grad and master streams'
/// update_prefetch_elements ahead, and (`State`) each kept array's (its arrays.prefetch).
template <class Policy, int V, bool State, class ParamT, class GradT, class MasterT, class Arrays>
KOKKOS_FORCEINLINE_FUNCTION void prefetch_lanes(std::int64_t i, const ParamT* param,
                                                const GradT* grad, const MasterT* master,
                                                const Arrays& arrays) {
  constexpr unsigned kept = Policy::arrays_of(V);
  const float* none = nullptr;  // the arrays' streams are the arrays' own to prefetch
  prefetch_update<Policy, V, false>(i, param, grad, master, none, none, none);
  for (int k = 0; k < 3; ++k)
    if (State && (kept >> k & 1u) != 0) arrays.prefetch(k, i + update_prefetch_elements);
}

/// Elements [begin, ...) in vectors of 2 * lane_count (lane_count pairs), as many as fit
/// before `end`; returns where it stopped. Each line of each stream is prefetched
/// update_prefetch_elements ahead. `arrays`: the state arrays (Bf16Pairs, MixedPairs:
/// kopt/impl/paired_arrays.hpp; Q8Pairs, a q8 block's: kopt/impl/q8_pairs.hpp).
template <class Policy, int V, class F, class Arrays>
KOPT_LOOP_FUNCTION std::int64_t paired_lanes(std::int64_t begin, std::int64_t end,
                                             bfloat16* KOPT_RESTRICT param,
                                             const bfloat16* KOPT_RESTRICT grad,
                                             typename F::MasterT* KOPT_RESTRICT master,
                                             const Arrays arrays, const typename Policy::Scalars s,
                                             const ChunkRounding r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr bool remainder = std::is_same_v<typename F::MasterT, std::uint16_t>;
  constexpr bool nearest = std::is_same_v<typename F::MasterT, RoundToNearest>;
  constexpr std::int64_t step = 2 * lane_count;
  static_assert(32 % step == 0, "a line of a 16-bit stream is a whole number of steps");
  std::int64_t i = begin;
  for (; i + step <= end; i += step) {
    if (((i - begin) & 31) == 0) prefetch_lanes<Policy, V, true>(i, param, grad, master, arrays);
    // The vector's update under `guard`, from memory (read again for a rerun: nothing is
    // stored before the flags are known, and rereading keeps fewer vectors live than a copy).
    // Inlined always: with q8 arrays' decoding (Q8Pairs) GCC made it a call per vector, its
    // arrays through the stack, and q8 m and v took 128 cycles per 32 elements, not 100.
    const auto update = [&](const auto& guard, LaneF(&a)[3][2], LaneF(&out)[2])
        __attribute__((always_inline)) {
      const LaneU pw = load_lanes(param + i), gw = load_lanes(grad + i);
      LaneF w[2];  // the masters (or params) of the even and the odd elements
      if constexpr (remainder) {
        join_master_pairs(pw, load_lanes(master + i), w);
      } else {
        w[0] = even_floats(pw);
        w[1] = odd_floats(pw);
      }
      for (int k = 0; k < 3; ++k) {
        if ((kept >> k & 1u) != 0)
          arrays.load(k, i, a[k]);
        else
          a[k][0] = a[k][1] = LaneF{};
      }
      out[0] = Policy::template update_with<V>(w[0], even_floats(gw), a[0][0], a[1][0], a[2][0], s,
                                               guard);
      out[1] = Policy::template update_with<V>(w[1], odd_floats(gw), a[0][1], a[1][1], a[2][1], s,
                                               guard);
    };
    // The vector's results stored, rounded (Finite: none of them is NaN, so the roundings to
    // nearest take no NaN test: bf16_finite_pairs, split_finite_master_pairs).
    const auto store = [&]<bool Finite>(std::bool_constant<Finite>, const LaneF(&a)[3][2],
                                        const LaneF(&out)[2]) __attribute__((always_inline)) {
      if constexpr (remainder) {
        LaneU pw, rw;
        Finite ? split_finite_master_pairs(out, pw, rw) : split_master_pairs(out, pw, rw);
        store_lanes(param + i, pw);
        store_lanes(master + i, rw);
      } else if constexpr (nearest) {
        store_lanes(param + i, Finite ? bf16_finite_pairs(out[0], out[1])
                                      : bf16_nearest_pairs(out[0], out[1]));
      } else {
        store_lanes(param + i, pair_words(stochastic_lanes(float_bits(out[0]), r, i, 2, 0),
                                          stochastic_lanes(float_bits(out[1]), r, i, 2, 1)));
      }
      for (int k = 0; k < 3; ++k)
        if ((kept >> k & 1u) != 0) arrays.template store<Finite>(k, i, a[k]);
    };
    LaneF a[3][2], out[2];
    LaneFlags flags;
    update(FlagOverflow<LaneFlags>{flags}, a, out);
    // The guard flags the arrays it passes (m and v); the param rounded to nearest by integer
    // ops and the other arrays are flagged here, so that a clear vector stores no NaN.
    for (int h = 0; h < 2; ++h) {
      if constexpr (remainder || (nearest && !bf16_conversion_stores)) flags.flag(out[h]);
      for (int k = 0; k < 3; ++k)
        if ((kept & ~guarded_arrays_of<Policy>) >> k & 1u) flags.flag(a[k][h]);
    }
    if (flags.any()) [[unlikely]] {  // an interpolation overflowed (the guards decide), or a
                                     // value is not finite
      update(GuardEachElement{}, a, out);
      store(std::false_type{}, a, out);
    } else {
      store(std::true_type{}, a, out);
    }
  }
  return i;
}
#endif

}  // namespace kopt::Impl
