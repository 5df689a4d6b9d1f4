#pragma once
/// \file
/// The host loop of the narrow forms whose every stream is 16 bits: bf16 params and grads,
/// masters kept as remainders or not kept, state arrays all bf16 (AdamW's 18- and 14-byte
/// steps). Each element gets exactly fused_element's bits; only the way there differs.
///
/// - Pairs of elements are read as one 32-bit word and split into halves by a shift and a
///   mask, and written back the same way, so the vector loop widens and packs 16-bit data
///   with arithmetic instead of shuffles. Element by element, each 16-bit load and store
///   cost a shuffle, all on one port: that, not memory, bounded the 18-byte step (0.72 G
///   elements/s on one core of the 2-core Xeon, in cache, to the 28-byte step's 1.26).
/// - Where the policy has update_with (Adam), each strip of paired_strip elements runs it
///   unguarded first, from a snapshot of what the strip will overwrite, and runs again with
///   the guards only where an interpolation overflowed (never, in training that is not
///   already diverging). The guards' fallbacks were a fifth of the work of every element.
/// - Where the host has vector extensions, Adam's forms run paired_lanes instead
///   (kopt/impl/paired_lanes.hpp): the same, per vector, without the snapshot.

#include <bit>
#include <cstdint>
#include <cstring>
#include <kopt/adam_update.hpp>  // the guards: GuardEachElement, FlagOverflow
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/paired_lanes.hpp>
#include <type_traits>

namespace kopt::Impl {

/// Elements per strip: a multiple of 32 (one 64-byte line of each 16-bit stream).
inline constexpr std::int64_t paired_strip = 256;

/// Whether paired_host_loop runs the form: every stream 16-bit (bf16 param and grad, no
/// fp32 master, state arrays all bf16 or none kept), on a little-endian host (a word's low
/// half is its first element).
template <class Policy, int V, class ParamT, class GradT, class F>
inline constexpr bool paired_form =
    std::endian::native ==
        std::endian::little&& std::is_same_v<ParamT, bfloat16>&& std::is_same_v<GradT, bfloat16> &&
    !std::is_same_v<typename F::MasterT, float> &&
    (std::is_same_v<typename F::StateT, bfloat16> || Policy::arrays_of(V) == 0u);

/// Two 16-bit elements as one word, and back.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t load_pair(const T* at) {
  std::uint32_t w;
  std::memcpy(&w, at, sizeof w);
  return w;
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void store_pair(T* at, std::uint32_t w) {
  std::memcpy(at, &w, sizeof w);
}
KOKKOS_FORCEINLINE_FUNCTION std::uint16_t half_of(std::uint32_t w, int h) {
  return static_cast<std::uint16_t>(h != 0 ? w >> 16 : w & 0xffffu);
}

/// Pairs of elements [begin, end) (an even count): fused_element's update of each, the
/// policy's guarded update or (Unguarded) its unguarded one; returns the overflow flags.
template <class Policy, int V, bool Unguarded, class F>
KOPT_LOOP_FUNCTION std::uint32_t paired_span(
    std::int64_t begin, std::int64_t end, bfloat16* KOPT_RESTRICT param,
    const bfloat16* KOPT_RESTRICT grad, typename F::MasterT* KOPT_RESTRICT master,
    typename F::StateT* KOPT_RESTRICT s0, typename F::StateT* KOPT_RESTRICT s1,
    typename F::StateT* KOPT_RESTRICT s2, const typename Policy::Scalars s, const ChunkRounding r) {
  using MasterT = typename F::MasterT;
  using StateT = typename F::StateT;
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr bool remainder = std::is_same_v<MasterT, std::uint16_t>;
  // The state's element type as 16 bits (float only when no array is kept).
  using Narrow = std::conditional_t<std::is_same_v<StateT, bfloat16>, bfloat16, std::uint16_t>;
  const auto widen = [](std::uint32_t w, int h) { return to_float(bfloat16{half_of(w, h)}); };
  const auto state_word = [](auto* array, std::int64_t i) {
    return load_pair(reinterpret_cast<const Narrow*>(array) + i);
  };
  std::uint32_t overflow = 0;
  for (std::int64_t i = begin; i < end; i += 2) {
    const std::uint32_t pw = load_pair(param + i), gw = load_pair(grad + i);
    const std::uint32_t mw = remainder ? load_pair(master + i) : 0u;
    const std::uint32_t w0 = (kept & 1u) ? state_word(s0, i) : 0u;
    const std::uint32_t w1 = (kept & 2u) ? state_word(s1, i) : 0u;
    const std::uint32_t w2 = (kept & 4u) ? state_word(s2, i) : 0u;
    std::uint32_t po = 0, mo = 0, o0 = 0, o1 = 0, o2 = 0;
    for (int h = 0; h < 2; ++h) {
      float a0 = widen(w0, h), a1 = widen(w1, h), a2 = widen(w2, h);
      const bfloat16 p{half_of(pw, h)};
      const float w = remainder ? join_master(p, half_of(mw, h)) : to_float(p);
      float out;
      if constexpr (Unguarded)
        out = Policy::template update_with<V>(w, widen(gw, h), a0, a1, a2, s,
                                              FlagOverflow<std::uint32_t>{overflow});
      else
        out = Policy::template update<V>(w, widen(gw, h), a0, a1, a2, s);
      const int shift = 16 * h;
      if constexpr (remainder) {
        po |= static_cast<std::uint32_t>(split_param(out).bits) << shift;
        mo |= static_cast<std::uint32_t>(split_remainder(out)) << shift;
      } else if constexpr (std::is_same_v<MasterT, RoundToNearest>) {
        po |= static_cast<std::uint32_t>(bfloat16::from_float(out).bits) << shift;
      } else {
        po |= static_cast<std::uint32_t>(round_stochastic(out, r.bits(i + h)).bits) << shift;
      }
      o0 |= static_cast<std::uint32_t>(bfloat16::from_float(a0).bits) << shift;
      o1 |= static_cast<std::uint32_t>(bfloat16::from_float(a1).bits) << shift;
      o2 |= static_cast<std::uint32_t>(bfloat16::from_float(a2).bits) << shift;
    }
    store_pair(param + i, po);
    if constexpr (remainder) store_pair(master + i, mo);
    if constexpr ((kept & 1u) != 0) store_pair(s0 + i, o0);
    if constexpr ((kept & 2u) != 0) store_pair(s1 + i, o1);
    if constexpr ((kept & 4u) != 0) store_pair(s2 + i, o2);
  }
  return overflow;
}

/// What one strip overwrites, kept until its unguarded run is known good.
template <class F, unsigned Kept>
struct StripSnapshot {
  static constexpr std::size_t bytes = paired_strip * 2;
  unsigned char param[bytes], master[bytes], state[3][bytes];

  // Inline functions of both spaces, as paired_host_loop (KOPT_LOOP_FUNCTION) that calls
  // them: nvcc warns of a host function called from one.
  template <class T>
  KOKKOS_INLINE_FUNCTION static void save(unsigned char* to, const T* from) {
    std::memcpy(to, static_cast<const void*>(from), bytes);
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static void load(T* to, const unsigned char* from) {
    std::memcpy(static_cast<void*>(to), from, bytes);
  }
  template <class P, class M, class S>
  KOKKOS_INLINE_FUNCTION void take(std::int64_t i, const P* p, const M* m, const S* s0, const S* s1,
                                   const S* s2) {
    save(param, p + i);
    if constexpr (std::is_same_v<typename F::MasterT, std::uint16_t>) save(master, m + i);
    if constexpr ((Kept & 1u) != 0) save(state[0], s0 + i);
    if constexpr ((Kept & 2u) != 0) save(state[1], s1 + i);
    if constexpr ((Kept & 4u) != 0) save(state[2], s2 + i);
  }
  template <class P, class M, class S>
  KOKKOS_INLINE_FUNCTION void restore(std::int64_t i, P* p, M* m, S* s0, S* s1, S* s2) const {
    load(p + i, param);
    if constexpr (std::is_same_v<typename F::MasterT, std::uint16_t>) load(m + i, master);
    if constexpr ((Kept & 1u) != 0) load(s0 + i, state[0]);
    if constexpr ((Kept & 2u) != 0) load(s1 + i, state[1]);
    if constexpr ((Kept & 4u) != 0) load(s2 + i, state[2]);
  }
};

/// The chunk loop of a paired_form: paired_lanes where it runs the form, else strips of
/// paired_strip elements, each after a prefetch of its streams update_prefetch_elements ahead;
/// the pairs left by paired_span, guarded; the last odd element by fused_element.
template <class Policy, int V, class ParamT, class GradT, class F>
KOPT_LOOP_FUNCTION void paired_host_loop(
    std::int64_t begin, std::int64_t end, bfloat16* KOPT_RESTRICT param,
    const bfloat16* KOPT_RESTRICT grad, typename F::MasterT* KOPT_RESTRICT master,
    typename F::StateT* KOPT_RESTRICT s0, typename F::StateT* KOPT_RESTRICT s1,
    typename F::StateT* KOPT_RESTRICT s2, const typename Policy::Scalars s, const ChunkRounding r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  std::int64_t i = begin;
  if constexpr (lanes_form<Policy, V, F>) {
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    i = paired_lanes<Policy, V, F>(begin, end, param, grad, master,
                                   Bf16Pairs<false>{{s0, s1, s2}, r}, s, r);
#endif
  }
  for (; !lanes_form<Policy, V, F> && i + paired_strip <= end; i += paired_strip) {
    for (std::int64_t line = 0; line < paired_strip; line += 32)
      prefetch_update<Policy, V, true>(i + line, param, grad, master, s0, s1, s2);
    if constexpr (has_update_with<Policy, V>) {
      StripSnapshot<F, kept> before;
      before.take(i, param, master, s0, s1, s2);
      const std::uint32_t overflow = paired_span<Policy, V, true, F>(
          i, i + paired_strip, param, grad, master, s0, s1, s2, s, r);
      if ((overflow & 0x80000000u) == 0) continue;
      before.restore(i, param, master, s0, s1, s2);
    }
    paired_span<Policy, V, false, F>(i, i + paired_strip, param, grad, master, s0, s1, s2, s, r);
  }
  const std::int64_t pairs_end = i + ((end - i) & ~std::int64_t{1});
  paired_span<Policy, V, false, F>(i, pairs_end, param, grad, master, s0, s1, s2, s, r);
  if (pairs_end < end)
    fused_element<Policy, V, ParamT, GradT, F>(pairs_end, param, grad, master, s0, s1, s2, s, r);
}

}  // namespace kopt::Impl
