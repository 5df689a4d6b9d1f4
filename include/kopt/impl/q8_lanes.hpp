#pragma once
/// \file
/// q8 blocks (kopt/impl/block_q8.hpp) in the host's update of Adam's q8 moments
/// (narrow_host_loop, kopt/impl/host_loops.hpp): a block's codes are decoded as fused_lanes
/// loads them (kopt/impl/q8_code_lanes.hpp), its new values kept in L1 scratch, and the
/// block encoded from there once its largest magnitude is known.

#include <cstdint>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/fused_lanes.hpp>
#include <kopt/impl/narrow_lanes.hpp>
#include <kopt/impl/q8_code_lanes.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// fused_lanes' state arrays over one q8 block's elements [first, first + q8_block): q8
/// arrays decoded from their codes, their new values into `scratch` (q8_block floats each)
/// for q8_encode_block; the others as NarrowArrays reads and writes them.
struct Q8BlockArrays {
  void* at[3];
  StateDTypes d;
  ChunkRounding r;  ///< the bits of stochastic stores
  std::int64_t first;
  float* scratch[3];
  float scale[3];

  KOKKOS_FORCEINLINE_FUNCTION NarrowArrays narrow() const {
    return NarrowArrays{{at[0], at[1], at[2]}, d, r};
  }

  KOKKOS_FORCEINLINE_FUNCTION bool q8(int k) const { return d.of[k] == DType::q8; }
  KOKKOS_FORCEINLINE_FUNCTION const unsigned char* codes(int k) const {
    return q8_block_of(at[k], first);
  }
  KOKKOS_FORCEINLINE_FUNCTION LaneF load(int k, std::int64_t i) const {
    if (!q8(k)) return narrow().load(k, i);
    const LaneU c = load_code_lanes(codes(k) + (i - first));
    return d.root(k) ? q8_decode_lanes<true>(c, scale[k]) : q8_decode_lanes<false>(c, scale[k]);
  }
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, LaneF x) const {
    if (!q8(k)) return narrow().store(k, i, x);
    store_lanes(scratch[k] + (i - first), float_bits(x));
  }
  /// A q8 array's block ahead is asked for once per block (q8_lanes_blocks).
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    if (!q8(k)) narrow().prefetch(k, i);
  }
};

/// narrow_host_loop's whole q8 blocks in [begin, end) (begin starts one): each block's
/// update by fused_lanes over Q8BlockArrays, then each q8 array's block encoded. Returns
/// where it stopped (a param's last, partial block is left to the staging loop).
template <class Policy, int V, class ParamT, class GradT, class F>
KOPT_LOOP_FUNCTION std::int64_t q8_lanes_blocks(std::int64_t begin, std::int64_t end,
                                                ParamT* KOPT_RESTRICT param,
                                                const GradT* KOPT_RESTRICT grad,
                                                typename F::MasterT* KOPT_RESTRICT master,
                                                void* const (&at)[3], const StateDTypes d,
                                                const typename Policy::Scalars& s,
                                                const ChunkRounding& r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  alignas(64) float scratch[3][q8_block];
  std::int64_t i = begin;
  for (; i + q8_block <= end; i += q8_block) {
    Q8BlockArrays arrays{{at[0], at[1], at[2]}, d, r, i, {scratch[0], scratch[1], scratch[2]}, {}};
    for (int k = 0; k < 3; ++k) {
      if ((kept >> k & 1u) == 0 || !arrays.q8(k)) continue;
      arrays.scale[k] = q8_scale_of(arrays.codes(k));
      const unsigned char* next = q8_block_of(at[k], i + update_prefetch_elements);
      for (std::int64_t b = 0; b < q8_block_bytes; b += 64) prefetch_ahead(next, b);
    }
    fused_lanes<Policy, V, ParamT, GradT, F, true>(i, i + q8_block, param, grad, master, arrays, s,
                                                   r);
    for (int k = 0; k < 3; ++k) {
      if ((kept >> k & 1u) == 0 || !arrays.q8(k)) continue;
      auto* block = q8_block_of(at[k], i);
      const ChunkRounding rk = r.of_array(k);
      const ChunkRounding* stochastic = d.stochastic ? &rk : nullptr;
      d.root(k) ? q8_encode_block<true>(scratch[k], block, stochastic, i)
                : q8_encode_block<false>(scratch[k], block, stochastic, i);
    }
  }
  return i;
}
#endif

}  // namespace kopt::Impl
