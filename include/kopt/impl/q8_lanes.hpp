#pragma once
/// \file
/// q8 blocks (kopt/impl/block_q8.hpp) in the host's update of Adam's q8 moments
/// (narrow_host_loop, kopt/impl/host_loops.hpp) where the paired loop does not take them
/// (fp32 params or masters, f32 grads, stochastic bf16 and f16 arrays beside q8 ones):
/// q8_block_loop in element order, each block updated by fused_lanes over its values in L1
/// and the other arrays in their dtypes. (Decoded as fused_lanes loaded them, with every
/// array's dtype tested per vector, q8 m and v with an fp32 master ran 127 cycles per 32
/// elements on one Zen 5 core in cache.)

#include <cstdint>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/fused_lanes.hpp>
#include <kopt/impl/narrow_lanes.hpp>
#include <kopt/impl/q8_block_loop.hpp>
#include <kopt/impl/q8_code_lanes.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// fused_lanes' state arrays over one q8 block's elements [first, first + q8_block): a q8
/// array's values in `values` (q8_block floats each, in element order), read and updated
/// there; the others as NarrowArrays reads and writes them. AllQ8: every kept array is q8,
/// known at compile time (the dtype tests per vector took q8 m and v beside fp32 masters
/// from 84 to 115 cycles per 32 elements on one Zen 5 core in cache).
template <bool AllQ8>
struct Q8BlockArrays {
  NarrowArrays narrow;
  std::int64_t first;
  float* values[3];

  KOKKOS_FORCEINLINE_FUNCTION bool q8(int k) const { return AllQ8 || narrow.d.of[k] == DType::q8; }
  KOKKOS_FORCEINLINE_FUNCTION LaneF load(int k, std::int64_t i) const {
    if (!q8(k)) return narrow.load(k, i);
    return bits_float(load_lanes(values[k] + (i - first)));
  }
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, LaneF x) const {
    if (!q8(k)) return narrow.template store<Finite>(k, i, x);
    store_lanes(values[k] + (i - first), float_bits(x));
  }
  /// A q8 array's codes and scale ahead (the update reads its values from L1).
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    if (!q8(k)) return narrow.prefetch(k, i);
    prefetch_ahead(q8_block_of(narrow.at[k], i), i % q8_block);
  }
};

/// narrow_host_loop's whole q8 blocks in [begin, end) (begin starts one): q8_block_loop in
/// element order, each block updated by fused_lanes over Q8BlockArrays. Returns where it
/// stopped (a param's last, partial block is left to the staging loop).
template <class Policy, int V, class ParamT, class GradT, class F>
KOPT_LOOP_FUNCTION std::int64_t q8_lanes_blocks(std::int64_t begin, std::int64_t end,
                                                ParamT* KOPT_RESTRICT param,
                                                const GradT* KOPT_RESTRICT grad,
                                                typename F::MasterT* KOPT_RESTRICT master,
                                                void* const (&at)[3], const StateDTypes d,
                                                const typename Policy::Scalars& s,
                                                const ChunkRounding& r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  bool all_q8 = true;
  for (int k = 0; k < 3; ++k) all_q8 &= (kept >> k & 1u) == 0 || d.of[k] == DType::q8;
  return q8_block_loop<Q8ElementOrder>(
      begin, end, at, d, kept, r, [&](std::int64_t i, float(&values)[3][q8_block]) {
        const NarrowArrays narrow{{at[0], at[1], at[2]}, d, r};
        if (all_q8)
          fused_lanes<Policy, V, ParamT, GradT, F, true>(
              i, i + q8_block, param, grad, master,
              Q8BlockArrays<true>{narrow, i, {values[0], values[1], values[2]}}, s, r);
        else
          fused_lanes<Policy, V, ParamT, GradT, F, true>(
              i, i + q8_block, param, grad, master,
              Q8BlockArrays<false>{narrow, i, {values[0], values[1], values[2]}}, s, r);
      });
}
#endif

}  // namespace kopt::Impl
