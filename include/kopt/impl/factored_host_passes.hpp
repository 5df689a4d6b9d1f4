#pragma once
/// \file
/// Adafactor's statistics and norm passes on host spaces (kopt/impl/factored_moments.hpp
/// runs them): one read of a matrix for its row and its column sums, a thread per block of
/// rows, four rows at a time; the column sums joined a group of columns at a time; the
/// norm a thread per row. Each sum in the order the device passes add it
/// (kopt/impl/item_lanes.hpp), so both give the same bits; a 16-bit grad widened a strip at
/// a time first (kopt/impl/lane_sums.hpp), the same bits.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/dtype.hpp>
#include <kopt/impl/factored_items.hpp>
#include <kopt/impl/lane_sums.hpp>
#include <type_traits>

namespace kopt::Impl::detail {

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

/// Host, a thread per block of rows (factored_row_block): each row's sum as RowItems
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
  static constexpr bool strips = !std::is_same_v<GradT, float>;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t rb) const {
    const RowItems<GradT> row_items{g, scale, row_var, sums, cols, beta};  // its finish
    double* part = parts + rb * cols;
    for (std::int64_t j = 0; j < cols; ++j) part[j] = 0.0;
    const std::int64_t end = rows < (rb + 1) * block_rows ? rows : (rb + 1) * block_rows;
    std::int64_t i = rb * block_rows;
    for (; i + 4 <= end; i += 4) {
      const GradT* const four[4] = {g + i * cols, g + (i + 1) * cols, g + (i + 2) * cols,
                                    g + (i + 3) * cols};
      double s[4];
      row_group_sums<4, strips>(four, cols, scale, part, s);
      for (int q = 0; q < 4; ++q) row_items.finish(i + q, s[q]);
    }
    for (; i < end; ++i) {
      const GradT* const one[1] = {g + i * cols};
      double s[1];
      row_group_sums<1, strips>(one, cols, scale, part, s);
      row_items.finish(i, s[0]);
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

}  // namespace kopt::Impl::detail
