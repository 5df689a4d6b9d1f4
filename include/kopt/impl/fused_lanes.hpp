#pragma once
/// \file
/// fused_host_loop's vector loop (kopt/impl/host_loops.hpp) for a policy that gives
/// update_with (Adam) with fp32 state arrays: f32 or bf16 params and grads, the master an
/// fp32 copy, a remainder or none (rounded to nearest or stochastically); also the update of
/// narrow_host_loop's fp32 scratch. Each element gets exactly fused_element's bits.
///
/// As paired_lanes (kopt/impl/paired_lanes.hpp), in lane vectors so that Adam's overflow
/// guards run only for a vector whose interpolations overflowed: left to the auto-vectorizer,
/// every element computed both the interpolations and their fallbacks and selected, and the
/// 28-byte bf16 step (fp32 master, m and v) ran 1.45 G elements/s on one core of a 2-core AMD
/// EPYC (Zen 5) in cache, short of what two cores' memory feeds it (0.74-0.84 of its ceiling).
/// With AVX-512 BF16 the param rounds with the CPU's conversion where the vector holds no
/// subnormal (which the conversion would flush).

#include <cstdint>
#include <cstring>
#include <kopt/adam_update.hpp>  // the guards: GuardEachElement, FlagOverflow
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/lanes.hpp>
#include <kopt/impl/paired_lanes.hpp>  // has_update_with
#include <kopt/impl/param_remainder.hpp>
#include <type_traits>

namespace kopt::Impl {

/// Whether fused_host_loop runs fused_lanes for a form.
template <class Policy, int V, class ParamT, class GradT, class F>
inline constexpr bool fused_lanes_form =
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    has_update_with<Policy, V>&& std::is_same_v<typename F::StateT, float> &&
    (std::is_same_v<ParamT, float> ||
     std::is_same_v<ParamT, bfloat16>)&&(std::is_same_v<GradT, float> ||
                                         std::is_same_v<GradT, bfloat16>);
#else
    false;
#endif

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// lane_count 16-bit values, and their widening into (narrowing from) the low halves of lanes.
using LaneHalves = std::uint16_t __attribute__((vector_size(lane_bytes / 2)));

KOKKOS_FORCEINLINE_FUNCTION LaneU load_halves(const void* at) {
  LaneU u;
#if defined(__AVX512F__)  // one widening load (GCC 12 lowered the conversion to five ops,
                          // and the 26-byte step went 2.17 -> 2.48 G elements/s, one core)
  const __m512i w =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(static_cast<const __m256i*>(at)));
  std::memcpy(&u, &w, sizeof u);
#elif defined(__AVX2__)
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(at)));
  std::memcpy(&u, &w, sizeof u);
#else
  LaneHalves h;
  std::memcpy(&h, at, sizeof h);
  u = __builtin_convertvector(h, LaneU);
#endif
  return u;
}
KOKKOS_FORCEINLINE_FUNCTION void store_halves(void* at, LaneU low) {
  const LaneHalves h = __builtin_convertvector(low, LaneHalves);
  std::memcpy(at, &h, sizeof h);
}

/// lane_count elements as floats: f32 as they are, bf16 widened.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION LaneF load_floats(const T* at) {
  if constexpr (std::is_same_v<T, float>)
    return bits_float(load_lanes(at));
  else
    return bits_float(load_halves(at) << 16);
}

/// bfloat16::from_float of each lane, stored; Finite: no lane is NaN (without the CPU's
/// conversion, bf16_nearest_bits then goes without its NaN test, as bf16_finite_pairs).
template <bool Finite = false>
KOKKOS_FORCEINLINE_FUNCTION void store_bf16_nearest(bfloat16* at, LaneF x) {
#if defined(__AVX512BF16__) && defined(__AVX512DQ__)
  __m512 v;
  std::memcpy(&v, &x, sizeof v);
  if (_mm512_fpclass_ps_mask(v, 0x20) == 0) {  // no subnormal (see bf16_nearest_pairs)
    const __m256bh h = _mm512_cvtneps_pbh(v);
    std::memcpy(static_cast<void*>(at), &h, sizeof h);
    return;
  }
#endif
  const LaneU b = float_bits(x);
  store_halves(at,
               Finite && !bf16_conversion_stores ? bf16_rounded_up(b) >> 16 : bf16_nearest_bits(b));
}

/// fused_lanes' state arrays when they are fp32 (fused_host_loop's; narrow_lanes.hpp has
/// those of 16-bit dtypes).
struct Fp32Arrays {
  float* at[3];

  KOKKOS_FORCEINLINE_FUNCTION LaneF load(int k, std::int64_t i) const {
    return load_floats(at[k] + i);
  }
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, LaneF x) const {
    store_lanes(at[k] + i, float_bits(x));
  }
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    prefetch_ahead(at[k], i);
  }
};

/// Elements [begin, ...) in vectors of lane_count, as many as fit before `end`; returns where
/// it stopped. `arrays`: the state arrays (Fp32Arrays, NarrowArrays); PrefetchState: whether
/// they are streamed (else scratch in L1).
template <class Policy, int V, class ParamT, class GradT, class F, bool PrefetchState, class Arrays>
KOPT_LOOP_FUNCTION std::int64_t fused_lanes(std::int64_t begin, std::int64_t end,
                                            ParamT* KOPT_RESTRICT param,
                                            const GradT* KOPT_RESTRICT grad,
                                            typename F::MasterT* KOPT_RESTRICT master,
                                            const Arrays arrays, const typename Policy::Scalars s,
                                            const ChunkRounding r) {
  using MasterT = typename F::MasterT;
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr bool f32_param = std::is_same_v<ParamT, float>;
  // The param rounded to nearest by integer ops (a remainder's split; a bf16 param beside an
  // fp32 master or with none, without the CPU's conversion): flagged where not finite, as
  // paired_lanes does. (Flagged for the conversion too, the 28-byte step lost 12% on a Zen 5
  // core in cache.)
  constexpr bool rounded_param =
      !f32_param && (std::is_same_v<MasterT, std::uint16_t> ||
                     (!bf16_conversion_stores && !std::is_same_v<MasterT, RoundStochastic>));
  static_assert(update_prefetch_stride % lane_count == 0);
  std::int64_t i = begin;
  for (; i + lane_count <= end; i += lane_count) {
    if ((i - begin) % update_prefetch_stride == 0)
      prefetch_lanes<Policy, V, PrefetchState>(i, param, grad, master, arrays);
    // The vector's update under `guard`, from memory (read again for a rerun).
    const auto update = [&](const auto& guard, LaneF(&a)[3], LaneF& out) {
      LaneF w;  // the masters: an fp32 copy, joined from a remainder, or the params
      if constexpr (!f32_param && std::is_same_v<MasterT, float>)
        w = load_floats(master + i);
      else if constexpr (!f32_param && std::is_same_v<MasterT, std::uint16_t>)
        w = bits_float(join_master_bits(load_halves(param + i), load_halves(master + i)));
      else
        w = load_floats(param + i);
      for (int k = 0; k < 3; ++k) a[k] = (kept >> k & 1u) != 0 ? arrays.load(k, i) : LaneF{};
      out = Policy::template update_with<V>(w, load_floats(grad + i), a[0], a[1], a[2], s, guard);
    };
    // The vector's results stored (Finite: none is NaN, as paired_lanes' stores).
    const auto store = [&]<bool Finite>(std::bool_constant<Finite>, const LaneF(&a)[3], LaneF out)
        __attribute__((always_inline)) {
      if constexpr (f32_param) {
        store_lanes(param + i, float_bits(out));
      } else if constexpr (std::is_same_v<MasterT, float>) {
        store_lanes(master + i, float_bits(out));
        store_bf16_nearest<Finite>(param + i, out);
      } else if constexpr (std::is_same_v<MasterT, std::uint16_t>) {
        const LaneU x = float_bits(out);
        store_halves(param + i, Finite ? (x + 0x7fffu) >> 16 : split_param_bits(x));
        store_halves(master + i, x & 0xffffu);
      } else if constexpr (std::is_same_v<MasterT, RoundToNearest>) {
        store_bf16_nearest<Finite>(param + i, out);
      } else {
        store_halves(param + i, stochastic_lanes(float_bits(out), r, i, 1, 0));
      }
      for (int k = 0; k < 3; ++k)
        if ((kept >> k & 1u) != 0) arrays.template store<Finite>(k, i, a[k]);
    };
    LaneF a[3], out;
    LaneFlags flags;
    update(FlagOverflow<LaneFlags>{flags}, a, out);
    if constexpr (rounded_param) flags.flag(out);
    for (int k = 0; k < 3; ++k)
      if ((kept & ~guarded_arrays_of<Policy>) >> k & 1u) flags.flag(a[k]);
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
