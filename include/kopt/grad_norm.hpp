#pragma once
/// \file
/// The sum of squares of many gradients, where they live: one reduction over a chunk table,
/// the grad dtype chosen per chunk (not per element). The global norm for clipping and the
/// inf/nan check for loss scaling both come from it.

#include <algorithm>
#include <kopt/adam_kernel.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

/// sum(g[i]^2) over [begin, end), in double. Sixteen independent accumulators, fed from a
/// widened block of sixteen floats, so the loop vectorizes without reassociating one sum
/// (no -ffast-math).
template <class GradT>
KOPT_LOOP_FUNCTION double sum_of_squares(const GradT* KOPT_RESTRICT g, std::int64_t begin,
                                         std::int64_t end) {
  double lane[64] = {};
  std::int64_t i = begin;
  for (; i + 64 <= end; i += 64) {
    float block[64];
    for (int b = 0; b < 64; b += f16_block) widen_block(g + i + b, block + b);
    for (int k = 0; k < 64; ++k) lane[k] += static_cast<double>(block[k]) * block[k];
  }
  for (int k = 0; i < end; ++i, ++k) {
    const double x = to_float(g[i]);
    lane[k] += x * x;
  }
  double sum = 0.0;
  for (int k = 0; k < 64; ++k) sum += lane[k];
  return sum;
}

template <class GradT>
KOKKOS_INLINE_FUNCTION double element_square(const void* grad, std::int64_t i) {
  const double x = to_float(static_cast<const GradT*>(grad)[i]);
  return x * x;
}

/// Writes each chunk's sum of squares to partials(c). Per-chunk results, summed per param
/// on the host in chunk order, make the norm independent of thread count, schedule and of
/// which engine a param sits in (an offloaded param gives the same bits as a local one).
template <class ExecSpace>
struct GradChunkSumSqFunctor {
  using memory_space = typename ExecSpace::memory_space;
  Kokkos::View<const AdamSlot*, memory_space> slots_;
  Kokkos::View<const Chunk*, memory_space> chunks_;
  Kokkos::View<double*, memory_space> partials_;

  /// Host: one chunk per iteration.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const Chunk chunk = chunks_(c);
    const AdamSlot& slot = slots_(chunk.slot);
    switch (slot.grad_dtype) {
      case DType::bf16:
        partials_(c) =
            sum_of_squares(static_cast<const bfloat16*>(slot.grad), chunk.begin, chunk.end);
        break;
      case DType::f16:
        partials_(c) =
            sum_of_squares(static_cast<const float16*>(slot.grad), chunk.begin, chunk.end);
        break;
      default:
        partials_(c) = sum_of_squares(static_cast<const float*>(slot.grad), chunk.begin, chunk.end);
    }
  }

  /// Device: one team per chunk.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Chunk chunk = chunks_(team.league_rank());
    const AdamSlot& slot = slots_(chunk.slot);
    double partial = 0.0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, chunk.begin, chunk.end),
        [&](const std::int64_t i, double& s) {
          s += slot.grad_dtype == DType::bf16  ? element_square<bfloat16>(slot.grad, i)
               : slot.grad_dtype == DType::f16 ? element_square<float16>(slot.grad, i)
                                               : element_square<float>(slot.grad, i);
        },
        partial);
    Kokkos::single(Kokkos::PerTeam(team), [&]() { partials_(team.league_rank()) = partial; });
  }
};

/// The sums of squares of the grads of many params, per param, over one chunk table.
template <class ExecSpace>
class GradNorms {
 public:
  using memory_space = typename ExecSpace::memory_space;

  /// Sets the chunk table; each param's chunks must be contiguous and in order. All or
  /// nothing: on an allocation failure the old table stays.
  void set_chunks(const ExecSpace& exec, const std::string& label,
                  const std::vector<Chunk>& chunks) {
    std::vector<Chunk> chunks_host = chunks;
    auto table = upload_chunks(exec, label + "::norm_chunks", chunks);
    allocation_point();
    Kokkos::View<double*, memory_space> partials(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::norm_partials"), chunks.size());
    auto partials_host = Kokkos::create_mirror_view(partials);
    chunks_host_.swap(chunks_host);
    chunks_ = table;
    partials_ = partials;
    partials_host_ = partials_host;
  }

  /// per_slot[s] = sum of squares of the grads of slot s (0 for a slot without chunks), in
  /// double; +Inf or NaN where a grad element is not finite. Blocks.
  void sums(const ExecSpace& exec, const std::string& label,
            const Kokkos::View<const AdamSlot*, memory_space>& slots,
            std::vector<double>& per_slot) const {
    std::fill(per_slot.begin(), per_slot.end(), 0.0);
    const auto n = static_cast<std::int64_t>(chunks_host_.size());
    if (n == 0) return;
    launch_chunks(exec, label, n, GradChunkSumSqFunctor<ExecSpace>{slots, chunks_, partials_});
    Kokkos::deep_copy(exec, partials_host_, partials_);
    fence(exec, label);
    for (std::int64_t c = 0; c < n; ++c) per_slot[chunks_host_[c].slot] += partials_host_(c);
  }

 private:
  std::vector<Chunk> chunks_host_;
  Kokkos::View<Chunk*, memory_space> chunks_;
  Kokkos::View<double*, memory_space> partials_;
  typename Kokkos::View<double*, memory_space>::HostMirror partials_host_;
};

}  // namespace kopt::Impl
