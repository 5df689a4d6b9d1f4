#pragma once
/// \file
/// The host loops over one chunk's elements that the chunk kernel (kopt/impl/update_kernel.hpp)
/// runs on host spaces, for the forms paired_host_loop (kopt/impl/paired_loop.hpp) does not
/// take: fused_element's update over unit-stride streams, vectorized by the compiler, or by
/// fused_lanes where the policy and form allow (kopt/impl/fused_lanes.hpp); and the staging of
/// 16-bit state arrays of mixed dtypes through fp32 scratch.

#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/f16_blocks.hpp>
#include <kopt/impl/fused_lanes.hpp>
#include <kopt/impl/narrow_lanes.hpp>
#include <kopt/impl/narrow_state.hpp>
#include <kopt/impl/paired_loop.hpp>
#include <kopt/impl/q8_lanes.hpp>
#include <kopt/impl/q8_pairs.hpp>
#include <type_traits>

namespace kopt::Impl {

/// The host loop over one chunk: unit stride, restrict parameters, and a function of its own,
/// so GCC vectorizes it whatever it would otherwise be inlined into (inlined into the Serial
/// backend's loop, GCC 12 gave up on it). Blocks of 16 elements, each after a prefetch of
/// the lines 512 elements ahead; the block's loop vectorizes like the whole one did.
/// PrefetchState: whether s0..s2 are streamed arrays (else scratch in L1). fused_lanes first,
/// where it runs the form; these loops then take only its last elements.
template <class Policy, int V, class ParamT, class GradT, class F, bool PrefetchState = true>
KOPT_LOOP_FUNCTION void fused_host_loop(
    std::int64_t begin, std::int64_t end, ParamT* KOPT_RESTRICT param,
    const GradT* KOPT_RESTRICT grad, typename F::MasterT* KOPT_RESTRICT master,
    typename F::StateT* KOPT_RESTRICT s0, typename F::StateT* KOPT_RESTRICT s1,
    typename F::StateT* KOPT_RESTRICT s2, const typename Policy::Scalars s, const ChunkRounding r) {
  constexpr unsigned kept = bound_arrays<Policy, V>;
  std::int64_t i = begin;
  if constexpr (fused_lanes_form<Policy, V, ParamT, GradT, F>) {
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    i = fused_lanes<Policy, V, ParamT, GradT, F, PrefetchState>(begin, end, param, grad, master,
                                                                Fp32Arrays{{s0, s1, s2}}, s, r);
#endif
  }
#ifdef KOPT_HAVE_F16C
  // float16 params or grads: blocks of 16 with the CPU's conversions (f16_blocks.hpp); the
  // update itself is the same expression on the same floats, so only the conversions differ.
  // (fp32 state and masters only: remainders are of bf16 params, whose f16 grads take the
  // loop below, as do bf16 state arrays.)
  if constexpr ((std::is_same_v<ParamT, float16> ||
                 std::is_same_v<GradT, float16>)&&std::is_same_v<F, Fp32Form>) {
    static_assert(f16_block == update_prefetch_stride);
    for (; i + f16_block <= end; i += f16_block) {
      prefetch_update<Policy, V, PrefetchState>(i, param, grad, master, s0, s1, s2);
      float g[f16_block], p[f16_block];
      widen_block(grad + i, g);
      for (int k = 0; k < f16_block; ++k) {
        float unused0 = 0.0f, unused1 = 0.0f, unused2 = 0.0f;
        float& a0 = (kept & 1u) ? s0[i + k] : unused0;
        float& a1 = (kept & 2u) ? s1[i + k] : unused1;
        float& a2 = (kept & 4u) ? s2[i + k] : unused2;
        const float w = std::is_same_v<ParamT, float> ? to_float(param[i + k]) : master[i + k];
        p[k] = Policy::template update<V>(w, g[k], a0, a1, a2, s);
      }
      if constexpr (std::is_same_v<ParamT, float>) {
        for (int k = 0; k < f16_block; ++k) param[i + k] = p[k];
      } else {
        for (int k = 0; k < f16_block; ++k) master[i + k] = p[k];
        round_block(p, param + i);
      }
    }
  }
#endif
  for (; i + update_prefetch_stride <= end; i += update_prefetch_stride) {
    // Not for an fp32 update that keeps no state (plain SGD: two streams, which the hardware
    // prefetcher follows alone): there the requests cost 0.69 -> 0.88 of the ceiling (2^26,
    // 1 thread, the 2-core EPYC). A 16-bit param's master is state enough: plain SGD bf16
    // went 0.82 -> 1.15 of its ceiling with them (2^26, 1 and 2 threads, 2-core Xeon).
    if constexpr (kept != 0 || !std::is_same_v<ParamT, float>)
      prefetch_update<Policy, V, PrefetchState>(i, param, grad, master, s0, s1, s2);
    KOPT_VECTOR_LOOP
    for (int k = 0; k < update_prefetch_stride; ++k)
      fused_element<Policy, V, ParamT, GradT, F>(i + k, param, grad, master, s0, s1, s2, s, r);
  }
  for (; i < end; ++i)
    fused_element<Policy, V, ParamT, GradT, F>(i, param, grad, master, s0, s1, s2, s, r);
}

/// The host loop over one chunk with 16-bit state arrays (Form<M, NarrowState>): blocks of
/// narrow_stage elements, each array's block widened into fp32 scratch (an f32 array is used
/// in place), the fp32 form's loop run over it, the scratch rounded back. The update reads the
/// same floats as the fp32 form would, so only the arrays' rounding differs.
template <class Policy, int V, class ParamT, class GradT, class F>
KOPT_LOOP_FUNCTION void narrow_host_loop(std::int64_t begin, std::int64_t end,
                                         ParamT* KOPT_RESTRICT param,
                                         const GradT* KOPT_RESTRICT grad,
                                         typename F::MasterT* KOPT_RESTRICT master, void* s0,
                                         void* s1, void* s2, const StateDTypes d,
                                         const typename Policy::Scalars s, const ChunkRounding r) {
  using MasterT = typename F::MasterT;
  using Wide = Form<MasterT, float>;
  constexpr bool stored = std::is_same_v<MasterT, float> || std::is_same_v<MasterT, std::uint16_t>;
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr std::int64_t ahead = update_prefetch_elements;
  std::int64_t i = begin;
  if constexpr (paired_form<Policy, V, ParamT, GradT, Form<MasterT, bfloat16>> &&
                lanes_form<Policy, V, Form<MasterT, bfloat16>>) {
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    // Every stream 16-bit, the bf16 arrays rounded stochastically: the all-bf16 loop's
    // vectors, with stochastic stores (the staged loop's bits). fused_lanes below took 2.3x
    // the time of those arrays rounded to nearest; these 1.25x (2^26 elements, 2 threads
    // of a 2-core AVX2 EPYC: 169 -> 90 ms, 72.5 to nearest).
    // Arrays each bf16, f16 or f32, rounded to nearest: the same vectors, each array's
    // dtype switched per vector (MixedPairs). fused_lanes below took 1.2x (bf16 m beside an
    // fp32 v) and 1.3x (f16 m and v) their time: 2^26 elements, 2 threads of a 2-core Zen 5
    // EPYC at ~114 GB/s, 17.2 -> 14.3 ms and 17.4 -> 13.6 ms.
    // q8 arrays beside them: a block at a time, decoded into L1 (q8_pairs.hpp); fused_lanes'
    // q8 blocks below took 1.65x (q8 m and v) their time (34.7 -> 21.5 ms, the same EPYC).
    bool bf16 = d.stochastic;
    for (int k = 0; k < 3; ++k) bf16 &= (kept >> k & 1u) == 0 || d.of[k] == DType::bf16;
    using Paired = Form<MasterT, bfloat16>;
    if (bf16)
      i = paired_lanes<Policy, V, Paired>(
          begin, end, param, grad, master,
          Bf16Pairs<true>{
              {static_cast<bfloat16*>(s0), static_cast<bfloat16*>(s1), static_cast<bfloat16*>(s2)},
              r},
          s, r);
    else if (MixedPairs::takes(d, kept))
      i = paired_lanes<Policy, V, Paired>(begin, end, param, grad, master,
                                          MixedPairs{{s0, s1, s2}, d}, s, r);
    else if (Q8Pairs::takes(d, kept))  // q8 arrays among them (MixedPairs took the rest)
      i = q8_paired_blocks<Policy, V, Paired>(begin, end, param, grad, master, {s0, s1, s2}, d, s,
                                              r);
#endif
  }
  if constexpr (fused_lanes_form<Policy, V, ParamT, GradT, Wide>) {
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    // Each array read and written in its own dtype; q8 arrays a block at a time, decoded
    // as they are read and encoded from L1 (q8_lanes.hpp). A partial block takes the
    // staging below.
    bool q8 = false;
    for (int k = 0; k < 3; ++k) q8 |= (kept >> k & 1u) != 0 && d.of[k] == DType::q8;
    if (!q8)
      i = fused_lanes<Policy, V, ParamT, GradT, Wide, true>(i, end, param, grad, master,
                                                            NarrowArrays{{s0, s1, s2}, d, r}, s, r);
    else
      i = q8_lanes_blocks<Policy, V, ParamT, GradT, Wide>(i, end, param, grad, master, {s0, s1, s2},
                                                          d, s, r);
#endif
  }
  float b0[narrow_stage], b1[narrow_stage], b2[narrow_stage];
  for (; i < end; i += narrow_stage) {
    const int n = static_cast<int>(end - i < narrow_stage ? end - i : narrow_stage);
    float* t0 = (kept & 1u) ? stage_in(d.of[0], s0, i, n, b0, ahead, d.root(0)) : b0;
    float* t1 = (kept & 2u) ? stage_in(d.of[1], s1, i, n, b1, ahead, d.root(1)) : b1;
    float* t2 = (kept & 4u) ? stage_in(d.of[2], s2, i, n, b2, ahead, d.root(2)) : b2;
    MasterT* m = nullptr;
    if constexpr (stored && !std::is_same_v<ParamT, float>) m = master + i;
    fused_host_loop<Policy, V, ParamT, GradT, Wide, false>(0, n, param + i, grad + i, m, t0, t1, t2,
                                                           s, ChunkRounding{r.key, r.first + i});
    if constexpr ((kept & 1u) != 0) stage_out(d, 0, s0, i, n, t0, r);
    if constexpr ((kept & 2u) != 0) stage_out(d, 1, s1, i, n, t1, r);
    if constexpr ((kept & 4u) != 0) stage_out(d, 2, s2, i, n, t2, r);
  }
}

}  // namespace kopt::Impl
