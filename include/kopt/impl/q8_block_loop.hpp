#pragma once
/// \file
/// The host's loop over whole q8 blocks (kopt/impl/block_q8.hpp) of one chunk, shared by the
/// paired loop's q8 blocks (q8_paired_blocks, kopt/impl/q8_pairs.hpp) and the lane loop's
/// (q8_lanes_blocks, kopt/impl/q8_lanes.hpp), which differ in the order they keep a block's
/// values in (`Order`: Q8PairOrder, Q8ElementOrder) and in the update they run over it.
///
/// Each q8 array's block is decoded into L1 scratch in a pass of its own, the block updated
/// there, each q8 array's scale taken from its new values, and the block encoded after the
/// next block's update. Why a pass of its own: decoded as the update loads them, the codes
/// lengthened every vector's chain, and q8 m and v (bf16 params, a remainder) ran 99 cycles
/// per 32 elements on one Zen 5 core in cache against 83 so. Why a block late: the encoding
/// waits on the scale, a chain of ~50 cycles (the largest magnitude; a square root for root
/// arrays) the core could not overlap with the encoding behind it: ~9 of every 32 elements'
/// ~18 cycles of encoding; the next block's update now runs under it (83 -> 80).

#include <cstdint>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/narrow_state.hpp>  // StateDTypes
#include <kopt/impl/q8_code_lanes.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// Whole q8 blocks in [begin, end) (begin starts one) of arrays `at` with dtypes `d`, the
/// policy's kept arrays `kept`: update(i, values) updates block [i, i + q8_block), each q8
/// array k's values in values[k] (in Order's order). Returns where it stopped (a param's last,
/// partial block is left to the caller).
template <class Order, class Update>
KOPT_LOOP_FUNCTION std::int64_t q8_block_loop(std::int64_t begin, std::int64_t end,
                                              void* const (&at)[3], const StateDTypes& d,
                                              unsigned kept, const ChunkRounding& r,
                                              const Update& update) {
  using Values = float[3][q8_block];
  const auto q8 = [&](int k) { return (kept >> k & 1u) != 0 && d.of[k] == DType::q8; };
  alignas(64) float scratch[2][3][q8_block];  // a block's values, and the one before's
  float scale[3] = {};                        // the scales of the block before
  // Block `b`'s values, from `values`, encoded with `scale`.
  const auto encode = [&](std::int64_t b, const Values& values) {
    for (int k = 0; k < 3; ++k) {
      if (!q8(k)) continue;
      auto* block = q8_block_of(at[k], b);
      const ChunkRounding rk = r.of_array(k);
      const ChunkRounding* stochastic = d.stochastic ? &rk : nullptr;
      d.root(k) ? q8_encode_scaled<Order, true>(values[k], block, scale[k], stochastic, b)
                : q8_encode_scaled<Order, false>(values[k], block, scale[k], stochastic, b);
    }
  };
  std::int64_t i = begin;
  for (int n = 0; i + q8_block <= end; i += q8_block, ++n) {
    Values& values = scratch[n & 1];
    for (int k = 0; k < 3; ++k)
      if (q8(k))
        d.root(k) ? Order::template decode<true>(q8_block_of(at[k], i), values[k])
                  : Order::template decode<false>(q8_block_of(at[k], i), values[k]);
    update(i, values);
    if (n > 0) encode(i - q8_block, scratch[(n - 1) & 1]);
    for (int k = 0; k < 3; ++k)
      if (q8(k))
        scale[k] = d.root(k) ? q8_scale<true>(q8_block_top(values[k]))
                             : q8_scale<false>(q8_block_top(values[k]));
  }
  if (i > begin) encode(i - q8_block, scratch[((i - begin) / q8_block - 1) & 1]);
  return i;
}
#endif

}  // namespace kopt::Impl
