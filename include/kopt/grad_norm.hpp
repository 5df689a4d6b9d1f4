#pragma once
/// \file
/// The sum of squares of many gradients, where they live: one reduction over a chunk table,
/// the grad dtype chosen per chunk (not per element). The global norm for clipping and the
/// inf/nan check for loss scaling both come from it.

#include <kopt/adam_kernel.hpp>

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
    for (int k = 0; k < 64; ++k) block[k] = to_float(g[i + k]);
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

template <class ExecSpace>
struct GradSumSqFunctor {
  using memory_space = typename ExecSpace::memory_space;
  using value_type = double;
  Kokkos::View<const AdamSlot*, memory_space> slots_;
  Kokkos::View<const Chunk*, memory_space> chunks_;

  /// Host: one chunk per iteration.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c, double& sum) const {
    const Chunk chunk = chunks_(c);
    const AdamSlot& slot = slots_(chunk.slot);
    switch (slot.grad_dtype) {
      case DType::bf16:
        sum += sum_of_squares(static_cast<const bfloat16*>(slot.grad), chunk.begin, chunk.end);
        break;
      case DType::f16:
        sum += sum_of_squares(static_cast<const float16*>(slot.grad), chunk.begin, chunk.end);
        break;
      default:
        sum += sum_of_squares(static_cast<const float*>(slot.grad), chunk.begin, chunk.end);
    }
  }

  /// Device: one team per chunk; the team's partial sum is added once.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team, double& sum) const {
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
    Kokkos::single(Kokkos::PerTeam(team), [&]() { sum += partial; });
  }
};

/// Sum of squares over `chunks` on `exec`; blocks. Static schedule on the host so the
/// result is the same run to run.
template <class ExecSpace>
double grad_sum_of_squares(
    const ExecSpace& exec, const std::string& label,
    const Kokkos::View<const AdamSlot*, typename ExecSpace::memory_space>& slots,
    const Kokkos::View<const Chunk*, typename ExecSpace::memory_space>& chunks) {
  const auto n = static_cast<std::int64_t>(chunks.extent(0));
  double sum = 0.0;
  if (n == 0) return sum;
  const GradSumSqFunctor<ExecSpace> f{slots, chunks};
  if constexpr (runs_on_host<ExecSpace>) {
    Kokkos::parallel_reduce(label,
                            Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Static>,
                                                Kokkos::IndexType<std::int64_t>>(exec, 0, n),
                            f, sum);
  } else {
    Kokkos::parallel_reduce(
        label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(n), device_team_size), f, sum);
  }
  return sum;
}

}  // namespace kopt::Impl
