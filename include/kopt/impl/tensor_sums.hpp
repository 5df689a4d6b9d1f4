#pragma once
/// \file
/// Per-param sums for policies whose update needs them (LAMB's norms of p and of its
/// update): a pass over the chunk table before the update that writes nothing, each param's
/// sums joined exactly, and each param's rate (Policy::rate) uploaded for the update kernel.
///
/// A policy opts in with `tensor_sums` (how many sums), `measures(variant)`, `measure(...)`
/// (the values whose squares are summed, for one element) and `rate(scalars, sums)`; its
/// Scalars have a `rate` the update reads. Each block of tensor_sum_block elements is summed
/// in double in one fixed order and the block sums are added exactly (ExactSum), so a
/// param's sums are the same bits on every backend and thread count, and whatever chunks
/// (host and device chunk sizes differ) cut it.

#include <algorithm>
#include <kopt/impl/exact_sum.hpp>
#include <kopt/impl/measure_strip.hpp>
#include <kopt/impl/strip_sums.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

template <class Policy>
inline constexpr bool has_tensor_sums = requires {
  Policy::tensor_sums;
};

/// Element i's update inputs as the update reads them, writing nothing: the param (its
/// master: fp32 copy, joined remainder or the 16-bit param widened), the grad, the arrays.
template <class ParamT, class GradT, class MasterT>
KOKKOS_FORCEINLINE_FUNCTION void read_inputs(const UpdateSlot& slot, const StateDTypes& d,
                                             unsigned kept, std::int64_t i, float& w, float& g,
                                             float (&a)[3]) {
  const ParamT* param = static_cast<const ParamT*>(slot.param);
  if constexpr (std::is_same_v<ParamT, float>)
    w = param[i];
  else if constexpr (std::is_same_v<MasterT, float>)
    w = slot.master[i];
  else if constexpr (std::is_same_v<MasterT, std::uint16_t>)
    w = join_master(param[i], slot.remainder[i]);
  else
    w = to_float(param[i]);
  g = to_float(static_cast<const GradT*>(slot.grad)[i]);
  for (int k = 0; k < 3; ++k) a[k] = (kept >> k & 1u) != 0 ? d.load(k, slot.state[k], i) : 0.0f;
}

/// The measure pass of one kernel class: chunk_sums_(c, k) = the exact sum of the block
/// sums of sum k over chunk c (host: a chunk per iteration; devices: a team per chunk,
/// its block sums into block_sums_, joined by JoinTensorBlocks).
template <class ExecSpace, class Policy, int V, class ParamT, class GradT, class MasterT>
struct TensorSumsFunctor {
  using memory_space = typename ExecSpace::memory_space;
  using Scalars = typename Policy::Scalars;
  static constexpr int K = Policy::tensor_sums;
  Kokkos::View<const UpdateSlot*, memory_space> slots_;
  Kokkos::View<const Scalars*, memory_space> scalars_;
  Kokkos::View<const Chunk*, memory_space> chunks_;
  StateDTypes dtypes_;
  Kokkos::View<ExactSum**, memory_space> chunk_sums_;
  Kokkos::View<double**, memory_space> block_sums_;
  std::int64_t blocks_per_chunk_;

  KOKKOS_INLINE_FUNCTION static std::int64_t blocks_of(const Chunk& c) {
    return (c.end - c.begin + tensor_sum_block - 1) / tensor_sum_block;
  }
  /// Device strips: blocks a team measures into scratch at a time, each padded by a float so
  /// that the blocks a warp sums fall in distinct banks.
  static constexpr int strip_blocks = 64;
  static constexpr int padded_block = tensor_sum_block + 1;
  static int team_scratch_bytes() {
    return static_cast<int>(K * strip_blocks * padded_block * sizeof(float));
  }
  /// Host: chunk c in strips (measure_strip), each strip's 8 block sums at once
  /// (kopt/impl/strip_sums.hpp), added exactly to the chunk's.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    constexpr int S = measure_strip_size;
    const Chunk chunk = chunks_(c);
    const UpdateSlot& slot = slots_(chunk.slot);
    const Scalars& s = scalars_(slot.scalar_set);
    ExactSum acc[K];
    ExponentWindowLanes window[K];  // exact: the same bits as acc[k].add of each block sum
    alignas(64) float x[K * S];
    for (std::int64_t at = chunk.begin; at < chunk.end; at += S) {
      const int n = static_cast<int>(chunk.end - at < S ? chunk.end - at : S);
      measure_strip<Policy, V, ParamT, GradT, MasterT>(slot, dtypes_, at, n, s, x);
      for (int k = 0; k < K; ++k) {  // blocks past n are zeros, which add nothing
        double sums[blocks_per_strip];
        strip_square_sums(x + k * S, sums);
        window[k].add(sums, acc[k]);
      }
    }
    for (int k = 0; k < K; ++k) {
      window[k].flush(acc[k]);
      acc[k].normalize();
      chunk_sums_(c, k) = acc[k];
    }
  }
  /// Device: one team per chunk, a strip of blocks at a time: a thread per element measures
  /// it (the team's loads coalesced) into scratch, zeros past the chunk's end; then a thread
  /// per block sums it (block_square_sum: the host's bits). 1.72 ms for 2^26 fp32 elements
  /// on an H200 (LAMB's step 3.2 ms), at 37.5% occupancy (72 registers a thread) and waiting
  /// on its loads. Tried there and slower: a thread measuring a block alone (the same); a
  /// block on 16 vector lanes summed by Kokkos' shuffle reduction, whose tree is
  /// block_square_sum's (the same bits, 3.6 ms).
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t c = team.league_rank();
    const Chunk chunk = chunks_(c);
    const UpdateSlot& slot = slots_(chunk.slot);
    const Scalars& s = scalars_(slot.scalar_set);
    constexpr int stride = strip_blocks * padded_block;  // one sum's values
    const Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                       Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        x(team.team_scratch(0), K * stride);
    const int t = team.team_rank(), size = team.team_size();
    const std::int64_t blocks = blocks_of(chunk);
    for (std::int64_t first = 0; first < blocks; first += strip_blocks) {
      const std::int64_t at = chunk.begin + first * tensor_sum_block;
      const int nb =
          static_cast<int>(blocks - first < strip_blocks ? blocks - first : strip_blocks);
      for (int e = t; e < nb * tensor_sum_block; e += size) {
        float v[K] = {};
        if (at + e < chunk.end) {
          float w, g, a[3];
          read_inputs<ParamT, GradT, MasterT>(slot, dtypes_, Policy::arrays_of(V), at + e, w, g, a);
          Policy::measure(w, g, a[0], a[1], a[2], s, v);
        }
        const int place = e / tensor_sum_block * padded_block + e % tensor_sum_block;
        for (int k = 0; k < K; ++k) x(k * stride + place) = v[k];
      }
      team.team_barrier();
      for (int q = t; q < nb; q += size)
        for (int k = 0; k < K; ++k)
          block_sums_(c * blocks_per_chunk_ + first + q, k) =
              block_square_sum(&x(k * stride + q * padded_block));
      team.team_barrier();  // the scratch is the next strip's
    }
  }
};

/// The device path's second pass: chunk_sums_(c, k) from the block sums, exactly, a thread
/// per (chunk, sum), the block sums added through an ExponentWindow as the host adds them
/// (exact either way). 0.15 ms for 2^26 elements on an H200; a thread per chunk with
/// ExactSum::add alone, its digits read and written in local memory, 0.22 ms.
template <class Functor>
struct JoinTensorBlocks {
  Functor pass;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t t) const {
    const std::int64_t c = t / Functor::K;
    const int k = static_cast<int>(t - c * Functor::K);
    const std::int64_t blocks = Functor::blocks_of(pass.chunks_(c));
    ExactSum acc;
    ExponentWindow window;
    for (std::int64_t b = 0; b < blocks; ++b)
      window.add(pass.block_sums_(c * pass.blocks_per_chunk_ + b, k), acc);
    window.flush(acc);
    acc.normalize();
    pass.chunk_sums_(c, k) = acc;
  }
};

}  // namespace kopt::Impl
