#pragma once
/// \file
/// The sum of squares of many gradients, where they live: one pass over a chunk table, the
/// grad dtype chosen per chunk (not per element). The global norm for clipping and the
/// inf/nan check for loss scaling both come from it.
///
/// The sum is reproducible: each canonical block of 64 elements (at global offsets of a
/// param that are multiples of 64) is summed in one fixed order, and the block sums are
/// added exactly (kopt/impl/exact_sum.hpp). Pieces of blocks that this engine holds only in
/// part come back as fragments for the optimizer to reassemble (kopt/impl/norm_parts.hpp).

#include <algorithm>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/norm_parts.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace kopt::Impl {

/// Adds the blocks of g[begin, end) to `acc`: `begin` is at a block boundary, and a short
/// last block is the end of the param (its missing elements are zeros).
template <class GradT>
KOPT_LOOP_FUNCTION void add_blocks(const GradT* KOPT_RESTRICT g, std::int64_t begin,
                                   std::int64_t end, ExactSum& acc) {
  ExponentWindow window;
  std::int64_t i = begin;
  for (; i + norm_block <= end; i += norm_block) {
    prefetch_block_ahead(g + i);
    window.add(block_sum_of_squares(g + i), acc);
  }
  window.flush(acc);
  if (i < end) {
    float v[norm_block];
    for (int k = 0; k < norm_block; ++k) v[k] = i + k < end ? to_float(g[i + k]) : 0.0f;
    acc.add(block_sum_of_squares(v));
  }
  acc.normalize();
}

/// Chunks [0, bodies_) hold whole blocks: partials_(c) = their exact sum. Chunks from
/// bodies_ on are fragments: their elements, widened, into fragment_values_.
template <class ExecSpace>
struct GradChunkSumSqFunctor {
  using memory_space = typename ExecSpace::memory_space;
  Kokkos::View<const UpdateSlot*, memory_space> slots_;
  Kokkos::View<const Chunk*, memory_space> chunks_;
  Kokkos::View<ExactSum*, memory_space> partials_;
  Kokkos::View<float* [norm_block], memory_space> fragment_values_;
  std::int64_t bodies_;
  /// Device path: the sum of block b of body chunk c at (c * blocks_per_chunk_ + b), for
  /// JoinBlockSumsFunctor to add exactly. (An exact accumulator per thread took 146
  /// registers, and with them 7 of every 8 warps an H200 could run.)
  Kokkos::View<double*, memory_space> block_sums_ = {};
  std::int64_t blocks_per_chunk_ = 0;

  KOKKOS_INLINE_FUNCTION float element(const UpdateSlot& slot, std::int64_t i) const {
    return slot.grad_dtype == DType::bf16  ? to_float(static_cast<const bfloat16*>(slot.grad)[i])
           : slot.grad_dtype == DType::f16 ? to_float(static_cast<const float16*>(slot.grad)[i])
                                           : static_cast<const float*>(slot.grad)[i];
  }

  /// Host: one chunk per iteration.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const Chunk chunk = chunks_(c);
    const UpdateSlot& slot = slots_(chunk.slot);
    if (c >= bodies_) {
      for (std::int64_t i = chunk.begin; i < chunk.end; ++i)
        fragment_values_(c - bodies_, i - chunk.begin) = element(slot, i);
      return;
    }
    ExactSum acc;
    switch (slot.grad_dtype) {
      case DType::bf16:
        add_blocks(static_cast<const bfloat16*>(slot.grad), chunk.begin, chunk.end, acc);
        break;
      case DType::f16:
        add_blocks(static_cast<const float16*>(slot.grad), chunk.begin, chunk.end, acc);
        break;
      default:
        add_blocks(static_cast<const float*>(slot.grad), chunk.begin, chunk.end, acc);
    }
    partials_(c) = acc;
  }

  /// Device strips: blocks a team reads into scratch at a time; a block's place there is
  /// padded by 8 floats so that the lanes of 4 blocks (a warp) fall in 32 distinct banks.
  static constexpr int strip_blocks = 32;
  static constexpr int padded_block = norm_block + 8;
  static int team_scratch_bytes() {
    return static_cast<int>(strip_blocks * (padded_block * sizeof(float) + 8 * sizeof(double)) +
                            128);  // + Kokkos' alignment of the second view
  }

  /// Device: one team per chunk, a strip of blocks at a time. The team reads the strip into
  /// scratch, widened, each thread a few elements apart by the team's size (coalesced, the
  /// loads issued together); then a thread per lane adds its lane (block_lane), and a thread
  /// per block joins them (join_lanes): the bits of the host's block sums. One thread per
  /// block reading its 64 elements alone reached 0.14 of the read ceiling on an H200.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t c = team.league_rank();
    const Chunk chunk = chunks_(c);
    const UpdateSlot& slot = slots_(chunk.slot);
    if (c >= bodies_) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, chunk.begin, chunk.end),
                           [&](const std::int64_t i) {
                             fragment_values_(c - bodies_, i - chunk.begin) = element(slot, i);
                           });
      return;
    }
    using Space = typename ExecSpace::scratch_memory_space;
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    const Kokkos::View<float*, Space, Unmanaged> v(team.team_scratch(0),
                                                   strip_blocks * padded_block);
    const Kokkos::View<double*, Space, Unmanaged> lanes(team.team_scratch(0), strip_blocks * 8);
    const int t = team.team_rank(), size = team.team_size();
    const std::int64_t blocks = blocks_of(chunk);
    for (std::int64_t first = 0; first < blocks; first += strip_blocks) {
      const std::int64_t at = chunk.begin + first * norm_block;
      const int nb =
          static_cast<int>(blocks - first < strip_blocks ? blocks - first : strip_blocks);
      const int n = nb * norm_block;  // the last block's missing elements are zeros
      for (int e0 = t; e0 < n; e0 += 4 * size) {
        float x[4];
        for (int j = 0; j < 4; ++j) {
          const int e = e0 + j * size;
          x[j] = e < n && at + e < chunk.end ? element(slot, at + e) : 0.0f;
        }
        for (int j = 0; j < 4; ++j) {
          const int e = e0 + j * size;
          if (e < n) v(e / norm_block * padded_block + e % norm_block) = x[j];
        }
      }
      team.team_barrier();
      for (int l = t; l < nb * 8; l += size) lanes(l) = block_lane(&v(l / 8 * padded_block), l % 8);
      team.team_barrier();
      for (int q = t; q < nb; q += size) {
        double lane[8];
        for (int k = 0; k < 8; ++k) lane[k] = lanes(q * 8 + k);
        block_sums_(c * blocks_per_chunk_ + first + q) = join_lanes(lane);
      }
      team.team_barrier();  // the scratch is the next strip's
    }
  }

  KOKKOS_INLINE_FUNCTION static std::int64_t blocks_of(const Chunk& chunk) {
    return (chunk.end - chunk.begin + norm_block - 1) / norm_block;
  }
};

/// The device path's second pass: partials_(c) = the exact sum of body chunk c's block sums
/// (exact, so the same bits as the host path's, whatever the order).
template <class ExecSpace>
struct JoinBlockSumsFunctor {
  GradChunkSumSqFunctor<ExecSpace> pass;

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const std::int64_t blocks = GradChunkSumSqFunctor<ExecSpace>::blocks_of(pass.chunks_(c));
    ExactSum acc;
    for (std::int64_t b = 0; b < blocks; ++b)
      acc.add(pass.block_sums_(c * pass.blocks_per_chunk_ + b));
    acc.normalize();
    pass.partials_(c) = acc;
  }
};

/// Elements per norm chunk: a multiple of the block; on devices one block per thread of a
/// team.
template <class ExecSpace>
inline constexpr std::int64_t norm_chunk_size =
    runs_on_host<ExecSpace> ? chunk_size<ExecSpace> : std::int64_t{norm_block} * device_team_size;
static_assert(chunk_size<Kokkos::DefaultHostExecutionSpace> % norm_block == 0);

template <class ExecSpace>
class GradNorms;

/// The norm's view of `param` (a whole tensor or a piece of one) registered as slot `slot`.
template <class ExecSpace>
typename GradNorms<ExecSpace>::Piece norm_piece(std::size_t slot, const Tensor& param) {
  return {slot, param.numel, param.global_offset,
          param.is_shard() ? param.global_numel : param.global_offset + param.numel};
}

/// The grads of many params (one slot each) and their norm pass: which chunks hold whole
/// blocks, which are fragments of cut ones.
template <class ExecSpace>
class GradNorms {
 public:
  using memory_space = typename ExecSpace::memory_space;

  /// One piece of a param to cover: its slot and where it sits in its param.
  struct Piece {
    std::size_t slot;
    std::int64_t numel, global_offset, global_numel;
  };

  /// Plans the pass over `pieces`: chunks of at most `chunk` elements (a multiple of the
  /// block). All or nothing: on an allocation failure the old plan stays.
  void set_pieces(const ExecSpace& exec, const std::string& label, const std::vector<Piece>& pieces,
                  std::int64_t chunk) {
    std::vector<Chunk> chunks, fragment_chunks;
    std::vector<NormFragment> meta;
    for (const Piece& p : pieces) {
      const PieceBlocks body = piece_blocks(p.numel, p.global_offset, p.global_numel);
      const auto slot = static_cast<std::int32_t>(p.slot);
      for (std::int64_t b = body.body_begin; b < body.body_end; b += chunk)
        chunks.push_back(Chunk{b, std::min(body.body_end, b + chunk), slot});
      for (const auto& [b, e] :
           {std::pair{std::int64_t{0}, body.body_begin}, std::pair{body.body_end, p.numel}}) {
        if (b == e) continue;
        const std::int64_t at = p.global_offset + b;
        fragment_chunks.push_back(Chunk{b, e, slot});
        meta.push_back(NormFragment{p.slot,
                                    at / norm_block,
                                    static_cast<std::int32_t>(at % norm_block),
                                    static_cast<std::int32_t>(e - b),
                                    {}});
      }
    }
    const auto bodies = static_cast<std::int64_t>(chunks.size());
    chunks.insert(chunks.end(), fragment_chunks.begin(), fragment_chunks.end());
    auto table = upload_chunks(exec, label + "::norm_chunks", chunks);
    allocation_point();
    Kokkos::View<ExactSum*, memory_space> partials(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::norm_partials"),
        static_cast<std::size_t>(bodies));
    allocation_point();
    Kokkos::View<float* [norm_block], memory_space> values(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::norm_fragments"), meta.size());
    auto partials_host = Kokkos::create_mirror_view(partials);
    auto values_host = Kokkos::create_mirror_view(values);
    Kokkos::View<double*, memory_space> block_sums;
    if (!runs_on_host<ExecSpace>) {  // host spaces run the team path in tests only: on demand
      allocation_point();
      block_sums = decltype(block_sums)(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::norm_block_sums"),
          static_cast<std::size_t>(bodies * (chunk / norm_block)));
    }
    chunks_ = table;
    block_sums_ = block_sums;
    blocks_per_chunk_ = chunk / norm_block;
    bodies_ = bodies;
    num_chunks_ = static_cast<std::int64_t>(chunks.size());
    partials_ = partials;
    partials_host_ = partials_host;
    values_ = values;
    values_host_ = values_host;
    fragments_.swap(meta);
  }

  /// The exact sum over the whole blocks of every piece, and the fragments (their `param`
  /// is the slot); +Inf or NaN in the sum where a grad element is not finite. Blocks.
  void sums(const ExecSpace& exec, const std::string& label,
            const Kokkos::View<const UpdateSlot*, memory_space>& slots, NormParts& out) const {
    sums_(exec, label, slots, out, false);
  }
  /// The same through the device path (a league of teams), on a space that has it
  /// (has_device_paths): tests run it on the host's and compare it bitwise with the host path.
  void sums_with_teams(const ExecSpace& exec, const std::string& label,
                       const Kokkos::View<const UpdateSlot*, memory_space>& slots,
                       NormParts& out) const {
    static_assert(has_device_paths<ExecSpace>, "no device path compiled for this space");
    sums_(exec, label, slots, out, true);
  }

  /// Bytes of its tables and partial sums in memory_space.
  std::size_t workspace_bytes() const {
    return view_bytes(chunks_, partials_, block_sums_, values_);
  }

 private:
  void sums_(const ExecSpace& exec, const std::string& label,
             const Kokkos::View<const UpdateSlot*, memory_space>& slots, NormParts& out,
             bool teams) const {
    out.sum = ExactSum();
    out.fragments = fragments_;
    if (num_chunks_ == 0) return;
    // The team path (devices; host spaces in tests) sums blocks first, then joins them.
    const bool team_path = teams || takes_device_paths<ExecSpace>();
    const auto needed = static_cast<std::size_t>(bodies_ * blocks_per_chunk_);
    if (team_path && block_sums_.extent(0) < needed)  // host spaces only: tests
      block_sums_ = Kokkos::View<double*, memory_space>(label + "::norm_block_sums", needed);
    const GradChunkSumSqFunctor<ExecSpace> functor{slots,   chunks_,     partials_,        values_,
                                                   bodies_, block_sums_, blocks_per_chunk_};
    if constexpr (has_device_paths<ExecSpace>) {
      if (teams && runs_on_host<ExecSpace>)
        Kokkos::parallel_for(
            label,
            Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(num_chunks_), Kokkos::AUTO)
                .set_scratch_size(0, Kokkos::PerTeam(functor.team_scratch_bytes())),
            functor);
      else
        launch_chunks(exec, label, num_chunks_, functor);  // teams on devices
      if (team_path)
        Kokkos::parallel_for(label + "::join", Kokkos::RangePolicy<ExecSpace>(exec, 0, bodies_),
                             JoinBlockSumsFunctor<ExecSpace>{functor});
    } else {
      launch_chunks(exec, label, num_chunks_, functor);
    }
    Kokkos::deep_copy(exec, partials_host_, partials_);
    Kokkos::deep_copy(exec, values_host_, values_);
    fence(exec, label);
    for (std::int64_t c = 0; c < bodies_; ++c) {
      out.sum.join(partials_host_(c));
      if ((c & 0xffff) == 0xffff) out.sum.normalize();  // far from the 2^31 joins a digit holds
    }
    out.sum.normalize();
    for (std::size_t f = 0; f < out.fragments.size(); ++f)
      for (std::int32_t k = 0; k < out.fragments[f].count; ++k)
        out.fragments[f].values[k] = values_host_(f, k);
  }

  Kokkos::View<Chunk*, memory_space> chunks_;
  std::int64_t bodies_ = 0, num_chunks_ = 0;
  std::vector<NormFragment> fragments_;  ///< metadata of the fragment chunks, in order
  Kokkos::View<ExactSum*, memory_space> partials_;
  typename Kokkos::View<ExactSum*, memory_space>::HostMirror partials_host_;
  mutable Kokkos::View<double*, memory_space> block_sums_;  ///< see the functor
  std::int64_t blocks_per_chunk_ = 0;
  Kokkos::View<float* [norm_block], memory_space> values_;
  typename Kokkos::View<float* [norm_block], memory_space>::HostMirror values_host_;
};

}  // namespace kopt::Impl
