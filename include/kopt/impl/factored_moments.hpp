#pragma once
/// \file
/// Adafactor's per-param work (kopt/adafactor_config.hpp), read from one param's grad (any
/// dtype; scaled by the step's grad scale as it is read): the second-moment statistics (row
/// and column factors of a matrix, or the variance of a vector) updated, each row's factor
/// R_i / max(mean R, eps1) into the param's scratch, and ||u||^2 of its direction
/// u = g / sqrt(max(V, eps1^2)) (factored_u, which the update kernel recomputes: nothing per
/// element is stored between the passes). Every sum is in double in one fixed order (a row
/// or a block in lanes, kopt/impl/lane_sums.hpp; a column per block of rows, the blocks in
/// order; the rows in order by one thread where they were summed, the blocks of ||u||^2 in
/// order on the host), so the result is the same bits on every thread count and on host and
/// device spaces (whose passes differ: one read of a matrix for its row and column sums on
/// the host, a thread per block of rows; on devices two, with many more threads,
/// kopt/impl/item_lanes.hpp). On the host a 16-bit grad is widened a strip at a time before
/// the statistics' and the norm's sums (the same bits). Nothing waits for the device until
/// the caller fetches the sums (FactoredWork::fetch): one round trip per param a step, where
/// three (the mean of the rows, ||u||, ||p||) took 0.18 ms of an 8192 x 8192 step's 0.83 on
/// an H200.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/adafactor_config.hpp>
#include <kopt/compat.hpp>
#include <kopt/dtype.hpp>
#include <kopt/impl/factored_host_passes.hpp>
#include <kopt/impl/factored_items.hpp>
#include <kopt/impl/item_lanes.hpp>
#include <kopt/impl/lane_sums.hpp>
#include <kopt/storage_types.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace kopt::Impl {

/// Floats of per-param state: rows + cols (row_var, col_var) for a matrix, numel
/// (variance) for a param without a shape, none for an empty one.
inline std::int64_t factored_state_size(const Tensor& p) {
  return AdafactorConfig::tensor_state_size(p.is_matrix() ? p.rows : -1, p.cols, p.numel);
}

/// Floats of a param's factors (factored_step): rows + cols for a matrix, 1 + numel for a
/// vector, none for an empty param.
inline std::int64_t factored_scratch_size(const Tensor& p) {
  return p.numel == 0 ? 0 : p.is_matrix() ? p.rows + p.cols : 1 + p.numel;
}

/// Rows per block of a matrix's statistics pass on the host: at most 64 blocks, each a
/// thread's work, whose column sums are added in block order (a function of the shape
/// alone, so the same bits on every thread count).
inline std::int64_t factored_row_block(std::int64_t rows) {
  return std::max<std::int64_t>(16, (rows + 63) / 64);
}

/// Where a param's ||p||^2 block sums start in FactoredWork::sums: past its row sums (a
/// matrix's) or ||u||^2 block sums (a vector's), so both come to the host in one copy.
inline std::int64_t factored_norm_offset(const Tensor& p) {
  const std::int64_t blocks = factored_blocks(p.numel);
  return p.is_matrix() ? std::max(p.rows, blocks) : blocks;
}

/// Partial sums for params up to the sizes reserve() saw; allocated before a step.
template <class ExecSpace>
struct FactoredWork {
  using Device = Kokkos::Device<ExecSpace, typename ExecSpace::memory_space>;
  Kokkos::View<double*, Device> sums;
  typename Kokkos::View<double*, Device>::HostMirror sums_host;
  Kokkos::View<double*, Device> column_parts;  ///< per row block, its column sums
  Kokkos::View<double*, Device> lane_parts;    ///< devices: per row or block, its lanes' sums
  Kokkos::View<float[1], Device> divisor;      ///< max(mean R, eps1), for the row factors

  /// Grows the scratch to fit `p`. All or nothing.
  void reserve(const std::string& label, const Tensor& p) {
    // A matrix's row sums, or a block's (a vector's ||u||^2), then ||p||^2's blocks.
    const std::int64_t blocks = factored_blocks(p.numel);
    const std::int64_t n = factored_norm_offset(p) + blocks;
    std::int64_t parts = 0;
    if (p.is_matrix())
      parts = (p.rows + factored_row_block(p.rows) - 1) / factored_row_block(p.rows) * p.cols;
    auto s = sums;
    auto h = sums_host;
    auto c = column_parts;
    auto l = lane_parts;
    auto d = divisor;
    if (d.data() == nullptr) d = decltype(d)(label + "::factored_divisor");
    if (s.extent(0) < static_cast<std::size_t>(n)) {
      s = decltype(s)(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::factored_sums"),
                      static_cast<std::size_t>(n));
      h = Kokkos::create_mirror_view(s);
    }
    if (c.extent(0) < static_cast<std::size_t>(parts))
      c = decltype(c)(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::column_parts"),
                      static_cast<std::size_t>(parts));
    if (l.extent(0) < static_cast<std::size_t>(n * sum_lanes))
      l = decltype(l)(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::lane_parts"),
                      static_cast<std::size_t>(n * sum_lanes));
    sums = s, sums_host = h, column_parts = c, lane_parts = l, divisor = d;
  }

  std::size_t bytes() const { return view_bytes(sums, column_parts, lane_parts, divisor); }

  /// sums(0..n) to the host, once the passes that wrote them (on ExecSpace's default
  /// instance) are done: a step's one round trip per param. Blocks.
  void fetch(std::int64_t n) const {
    if (n == 0) return;
    const ExecSpace space{};
    const std::pair<std::int64_t, std::int64_t> first(0, n);
    Kokkos::deep_copy(space, Kokkos::subview(sums_host, first), Kokkos::subview(sums, first));
    space.fence();
  }
  /// sums(begin) + ... + sums(begin + n - 1), added in order on the host (after fetch).
  double sum_in_order(std::int64_t begin, std::int64_t n) const {
    double s = 0.0;
    for (std::int64_t i = begin; i < begin + n; ++i) s += sums_host(i);
    return s;
  }
};

namespace detail {
/// factored_step for grads of type GradT.
template <class ExecSpace, class GradT>
std::int64_t factored_step_of(const GradT* g, const Tensor& p, float* state, float* factors,
                              const FactoredCoefficients& k, FactoredWork<ExecSpace>& work) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  const float cap = factored_cap(k.eps1), scale = k.grad_scale;
  std::int64_t parts = 0;
  if (p.is_matrix()) {
    const std::int64_t rows = p.rows, cols = p.cols;
    float* row_var = state;
    float* col_var = state + rows;
    float* col_factor = factors + rows;
    const std::int64_t block = factored_row_block(rows), blocks = (rows + block - 1) / block;
    // Devices: the rows' and the columns' sums in two passes of their own, each in the
    // host's order (kopt/impl/item_lanes.hpp), so the same bits.
    const bool device = device_passes<ExecSpace>();
    if (device) {
      item_square_sums<ExecSpace>(
          "kopt::adafactor::rows", rows,
          RowItems<GradT>{g, scale, row_var, work.sums.data(), cols, k.beta},
          work.lane_parts.data());
      column_square_sums<ExecSpace>(
          "kopt::adafactor::columns", rows, cols, block, GradSquares<GradT>{g, scale, cols},
          ColumnFinish{col_var, col_factor, rows, k.beta}, work.column_parts.data());
    } else {
      Kokkos::parallel_for(
          "kopt::adafactor::row_blocks", Range(0, blocks),
          FactorRowBlock<GradT>{g, scale, row_var, work.sums.data(), work.column_parts.data(), rows,
                                cols, block, k.beta});
      constexpr std::int64_t group = FactorColumnParts::column_group;
      Kokkos::parallel_for("kopt::adafactor::columns", Range(0, (cols + group - 1) / group),
                           FactorColumnParts{work.column_parts.data(), col_var, col_factor, rows,
                                             cols, blocks, k.beta});
    }
    Kokkos::parallel_for("kopt::adafactor::row_mean", Range(0, 1),
                         RowMean{work.sums.data(), work.divisor.data(), rows, k.eps1});
    Kokkos::parallel_for("kopt::adafactor::row_factors", Range(0, rows),
                         RowFactors{row_var, factors, work.divisor.data()});
    if (device) {
      item_square_sums<ExecSpace>(
          "kopt::adafactor::norm", rows,
          NormItems<GradT>{g, scale, factors, col_factor, work.sums.data(), cols, cap},
          work.lane_parts.data());
    } else {
      constexpr bool strips = !std::is_same_v<GradT, float>;
      Kokkos::parallel_for("kopt::adafactor::norm", Range(0, rows),
                           FactoredNorm<GradT, strips>{NormItems<GradT>{
                               g, scale, factors, col_factor, work.sums.data(), cols, cap}});
    }
    parts = rows;
  } else {
    Kokkos::parallel_for("kopt::adafactor::row_factor", Range(0, 1), UnitFactor{factors});
    parts = factored_blocks(p.numel);
    item_square_sums<ExecSpace>(
        "kopt::adafactor::vector", parts,
        VectorItems<GradT>{g, scale, state, factors + 1, work.sums.data(), p.numel, k.beta, cap},
        work.lane_parts.data());
  }
  return parts;
}
}  // namespace detail

/// Updates the statistics `state` (factored_state_size(p) floats) of param `p` from its
/// grad (`grad`, of `dtype`) scaled by k.grad_scale, writes its factors (factored_scratch_size
/// floats: a matrix's row factors, then its column factors; a vector's 1, then one per
/// element) to `factors`, and leaves in work.sums(0..n) the n partial sums of ||u||^2 that
/// add in order to it; returns n. Runs on ExecSpace's default instance, asynchronously; the
/// caller fences its own first and fetches the sums after.
template <class ExecSpace>
std::int64_t factored_step(const void* grad, DType dtype, const Tensor& p, float* state,
                           float* factors, const FactoredCoefficients& k,
                           FactoredWork<ExecSpace>& work) {
  if (p.numel == 0) return 0;
  switch (dtype) {
    case DType::bf16:
      return detail::factored_step_of(static_cast<const bfloat16*>(grad), p, state, factors, k,
                                      work);
    case DType::f16:
      return detail::factored_step_of(static_cast<const float16*>(grad), p, state, factors, k,
                                      work);
    default:
      return detail::factored_step_of(static_cast<const float*>(grad), p, state, factors, k, work);
  }
}

}  // namespace kopt::Impl
