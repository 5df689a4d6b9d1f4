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
#include <kopt/impl/item_lanes.hpp>
#include <kopt/impl/lane_sums.hpp>
#include <kopt/storage_types.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace kopt::Impl {

/// Elements per partial sum of a vector's ||u||^2.
inline constexpr std::int64_t factored_vector_block = 4096;

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
  const std::int64_t blocks = (p.numel + factored_vector_block - 1) / factored_vector_block;
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
    const std::int64_t blocks = (p.numel + factored_vector_block - 1) / factored_vector_block;
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

/// The step's floats: b = t^beta2_decay (the statistics' lerp weight), eps1, and the scale
/// of the grads.
struct FactoredCoefficients {
  float beta;
  float eps1;
  float grad_scale;
};

/// 1 / sqrt(x): a row's or a column's factor of the direction.
KOKKOS_FORCEINLINE_FUNCTION float inverse_root(float x) { return 1.0f / KOPT_SQRT(x); }

/// 1 / sqrt(eps1^2): the largest factor the direction takes (where V is below eps1^2).
inline float factored_cap(float eps1) { return inverse_root(eps1 * eps1); }

/// Element (i, j)'s direction from its scaled grad g, its row's factor a = 1 / sqrt(R_i /
/// max(mean R, eps1)) and its column's b = 1 / sqrt(C_j) (a vector: 1 and 1 / sqrt(V_i)):
/// g min(a b, cap), which is g / sqrt(max(V, eps1^2)) for V = (R_i / mean) C_j up to the
/// rounding of the factors. Two multiplies and a compare per element, where a square root
/// and a divide per element made the norm pass compute-bound (2.4x a read of the grad).
KOKKOS_FORCEINLINE_FUNCTION float factored_u(float g, float row, float col, float cap) {
  const float f = row * col;
  return g * (f < cap ? f : cap);
}

namespace detail {
/// R <- R + b (mean - R), the statistics' lerp.
KOKKOS_FORCEINLINE_FUNCTION float lerp_to(float r, double sum, std::int64_t count, float beta) {
  return r + beta * (static_cast<float>(sum / static_cast<double>(count)) - r);
}

/// Devices (item_square_sums): row i's scaled grads; R_i <- lerp to the mean of their
/// squares, sums(i) = the new R_i.
template <class GradT>
struct RowItems {
  const GradT* g;
  float scale;
  float* row_var;
  double* sums;
  std::int64_t cols;
  float beta;
  KOKKOS_FORCEINLINE_FUNCTION std::int64_t length(std::int64_t) const { return cols; }
  KOKKOS_FORCEINLINE_FUNCTION float value(std::int64_t i, std::int64_t j) const {
    return to_float(g[i * cols + j]) * scale;
  }
  KOKKOS_FORCEINLINE_FUNCTION void finish(std::int64_t i, double s) const {
    row_var[i] = lerp_to(row_var[i], s, cols, beta);
    sums[i] = row_var[i];
  }
};

/// Devices (column_square_sums): element (i, j)'s scaled grad squared, in double.
template <class GradT>
struct GradSquares {
  const GradT* g;
  float scale;
  std::int64_t cols;
  KOKKOS_FORCEINLINE_FUNCTION double operator()(std::int64_t i, std::int64_t j) const {
    const double v = to_float(g[i * cols + j]) * scale;
    return v * v;
  }
};

/// Column j's statistic from its sum of squares s: C_j <- lerp to s / rows, its factor.
struct ColumnFinish {
  float* col_var;
  float* col_factor;
  std::int64_t rows;
  float beta;
  KOKKOS_FORCEINLINE_FUNCTION void operator()(std::int64_t j, double s) const {
    col_var[j] = lerp_to(col_var[j], s, rows, beta);
    col_factor[j] = inverse_root(col_var[j]);
  }
};

/// Element j of rows row[0..R): sq[q] = its square (scaled, in double) in row q, and
/// part[j] += the rows' squares, the four added in pairs ((0 + 1) + (2 + 3)).
template <int R, class T>
KOKKOS_FORCEINLINE_FUNCTION void group_squares(const T* const (&row)[R], std::int64_t j,
                                               float scale, double* part, double (&sq)[R]) {
  for (int q = 0; q < R; ++q) {
    const double v = to_float(row[q][j]) * scale;
    sq[q] = v * v;
  }
  if constexpr (R == 1)
    part[j] += sq[0];
  else
    part[j] += (sq[0] + sq[1]) + (sq[2] + sq[3]);
}

/// group_squares of elements [0, n) (n a multiple of sum_lanes), each row's into its lanes;
/// `Prefetch`: the rows asked for ahead (lane_prefetch).
template <int R, bool Prefetch = false, class T>
KOKKOS_FORCEINLINE_FUNCTION void add_group_squares(const T* const (&row)[R], std::int64_t n,
                                                   float scale, double* part,
                                                   double (&lane)[R][sum_lanes]) {
  for (std::int64_t j = 0; j < n; j += sum_lanes) {
    if constexpr (Prefetch)
      for (int q = 0; q < R; ++q) prefetch_ahead(row[q], j + lane_prefetch<T, R>);
    for (int k = 0; k < sum_lanes; ++k) {
      double sq[R];
      group_squares<R>(row, j + k, scale, part, sq);
      for (int q = 0; q < R; ++q) lane[q][k] += sq[q];
    }
  }
}

/// Rows row[0..R) of a matrix (R = 1 or 4): s[q] = row q's sum of squares in
/// lane_square_sum's order, and part[j] += the rows' squares of column j (group_squares).
/// Four rows at a time read and write the column sums a quarter as often: one row at a
/// time, they cost as much as the grad's read. Strips: a 16-bit grad widened a strip at a
/// time first (widened_strips), the same bits.
template <int R, bool Strips, class GradT>
KOKKOS_FORCEINLINE_FUNCTION void row_group_sums(const GradT* const (&row)[R], std::int64_t cols,
                                                float scale, double* part, double (&s)[R]) {
  static_assert(R == 1 || R == 4);
  double lane[R][sum_lanes] = {};
  const std::int64_t whole = cols / sum_lanes * sum_lanes;
  if constexpr (Strips)
    widened_strips<R>(row, whole, [&](const float* const(&x)[R], std::int64_t at, int n) {
      add_group_squares<R>(x, n, scale, part + at, lane);
    });
  else  // an fp32 grad, asked for ahead
    add_group_squares<R, true>(row, whole, scale, part, lane);
  for (int q = 0; q < R; ++q) {
    s[q] = 0.0;
    for (int k = 0; k < sum_lanes; ++k) s[q] += lane[q][k];
  }
  for (std::int64_t j = whole; j < cols; ++j) {
    double sq[R];
    group_squares<R>(row, j, scale, part, sq);
    for (int q = 0; q < R; ++q) s[q] += sq[q];
  }
}

/// Host, a thread per block of rows (factored_row_block): each row's sum as FactorRows
/// does, and the block's sum of each column into parts(block, j) (row_group_sums: groups
/// of four rows from the block's first, then one at a time), in the same read of the rows
/// (a thread per block of columns, reading the matrix down its columns, ran at half the
/// rate).
template <class GradT>
struct FactorRowBlock {
  const GradT* g;
  float scale;
  float* row_var;
  double* sums;
  double* parts;
  std::int64_t rows, cols, block_rows;
  float beta;
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t i, double s) const {
    row_var[i] = lerp_to(row_var[i], s, cols, beta);
    sums[i] = row_var[i];
  }
  static constexpr bool strips = !std::is_same_v<GradT, float>;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t rb) const {
    double* part = parts + rb * cols;
    for (std::int64_t j = 0; j < cols; ++j) part[j] = 0.0;
    const std::int64_t end = rows < (rb + 1) * block_rows ? rows : (rb + 1) * block_rows;
    std::int64_t i = rb * block_rows;
    for (; i + 4 <= end; i += 4) {
      const GradT* const four[4] = {g + i * cols, g + (i + 1) * cols, g + (i + 2) * cols,
                                    g + (i + 3) * cols};
      double s[4];
      row_group_sums<4, strips>(four, cols, scale, part, s);
      for (int q = 0; q < 4; ++q) finish(i + q, s[q]);
    }
    for (; i < end; ++i) {
      const GradT* const one[1] = {g + i * cols};
      double s[1];
      row_group_sums<1, strips>(one, cols, scale, part, s);
      finish(i, s[0]);
    }
  }
};

/// Host, columns [j0, j0 + column_group): C_j <- lerp to mean_i g_ij^2, each column's
/// blocks' sums added in block order. A group at a time, the adds run down contiguous
/// column sums in vectors (a thread per column read its sums 64 KiB apart, one at a time).
struct FactorColumnParts {
  static constexpr std::int64_t column_group = 64;
  const double* parts;
  float* col_var;
  float* col_factor;
  std::int64_t rows, cols, blocks;
  float beta;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t group) const {
    const std::int64_t j0 = group * column_group;
    const std::int64_t n = cols - j0 < column_group ? cols - j0 : column_group;
    double s[column_group] = {};
    for (std::int64_t rb = 0; rb < blocks; ++rb) {
      const double* part = parts + rb * cols + j0;
      for (std::int64_t k = 0; k < n; ++k) s[k] += part[k];
    }
    for (std::int64_t k = 0; k < n; ++k)
      ColumnFinish{col_var, col_factor, rows, beta}(j0 + k, s[k]);
  }
};

/// The rows' mean statistic: their sums (the new R_i) added in order, as a host would add
/// them, by one thread on the space that wrote them (a device keeps it: no round trip);
/// divisor = max(mean, eps1).
struct RowMean {
  const double* sums;
  float* divisor;
  std::int64_t rows;
  float eps1;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t) const {
    double s = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) s += sums[i];
    const auto mean = static_cast<float>(s / static_cast<double>(rows));
    divisor[0] = mean < eps1 ? eps1 : mean;  // std::max's: a NaN mean stays NaN
  }
};

/// Row i's factor: 1 / sqrt(R_i / divisor).
struct RowFactors {
  const float* row_var;
  float* factors;
  const float* divisor;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    factors[i] = inverse_root(row_var[i] / divisor[0]);
  }
};

/// A vector's one row factor: 1.
struct UnitFactor {
  float* factor;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { factor[i] = 1.0f; }
};

/// Row i of a matrix: its u_ij (factored_u); sums(i) = the sum of their squares. Its items
/// for devices (item_square_sums); FactoredNorm on the host.
template <class GradT>
struct NormItems {
  const GradT* g;
  float scale;
  const float* row_factor;
  const float* col_factor;
  double* sums;
  std::int64_t cols;
  float cap;
  /// u_ij from element (i, j)'s grad x.
  KOKKOS_FORCEINLINE_FUNCTION float u(std::int64_t i, std::int64_t j, float x) const {
    return factored_u(x * scale, row_factor[i], col_factor[j], cap);
  }
  KOKKOS_FORCEINLINE_FUNCTION std::int64_t length(std::int64_t) const { return cols; }
  KOKKOS_FORCEINLINE_FUNCTION float value(std::int64_t i, std::int64_t j) const {
    return u(i, j, to_float(g[i * cols + j]));
  }
  KOKKOS_FORCEINLINE_FUNCTION void finish(std::int64_t i, double s) const { sums[i] = s; }
};

/// Host, a thread per row: NormItems' sums in lane_square_sum's order, the row asked for
/// ahead. Strips (16-bit grads): the row widened a strip at a time first (widened_strips),
/// the same bits.
template <class GradT, bool Strips = false>
struct FactoredNorm {
  NormItems<GradT> items;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const std::int64_t cols = items.cols;
    const GradT* row = items.g + i * cols;
    if constexpr (Strips) {
      double lane[sum_lanes] = {};
      const std::int64_t whole = cols / sum_lanes * sum_lanes;
      const GradT* const one[1] = {row};
      widened_strips<1>(one, whole, [&](const float* const(&x)[1], std::int64_t at, int n) {
        add_lane_squares(
            n, [&](std::int64_t k) { return items.u(i, at + k, x[0][k]); }, lane);
      });
      items.finish(i, finish_lane_squares(lane, cols - whole, [&](std::int64_t j) {
                     return items.value(i, whole + j);
                   }));
    } else {
      items.finish(i, lane_square_sum(
                          cols, [&](std::int64_t j) { return items.value(i, j); }, row));
    }
  }
};

/// Block b of a vector (item_square_sums): element i's V_i <- V_i + b (g_i^2 - V_i), its
/// factor 1 / sqrt(V_i), its u_i (factored_u with a row factor of 1); sums(b) = the sum of
/// their squares.
template <class GradT>
struct VectorItems {
  const GradT* g;
  float scale;
  float* variance;
  float* factor;
  double* sums;
  std::int64_t numel;
  float beta, cap;
  KOKKOS_FORCEINLINE_FUNCTION std::int64_t length(std::int64_t b) const {
    const std::int64_t begin = b * factored_vector_block;
    return numel - begin < factored_vector_block ? numel - begin : factored_vector_block;
  }
  KOKKOS_FORCEINLINE_FUNCTION float value(std::int64_t b, std::int64_t k) const {
    const std::int64_t i = b * factored_vector_block + k;
    const float x = to_float(g[i]) * scale;
    const float v = variance[i] + beta * (x * x - variance[i]);
    variance[i] = v;
    factor[i] = inverse_root(v);
    return factored_u(x, 1.0f, factor[i], cap);
  }
  KOKKOS_FORCEINLINE_FUNCTION void finish(std::int64_t b, double s) const { sums[b] = s; }
};

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
    parts = (p.numel + factored_vector_block - 1) / factored_vector_block;
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
