#pragma once
/// \file
/// Adafactor's arithmetic per element, row and column (kopt/impl/factored_moments.hpp runs
/// the passes): the direction u and its factors, the statistics' lerp, and the items the
/// passes sum over (item_square_sums and column_square_sums on devices,
/// kopt/impl/item_lanes.hpp; the host's passes, kopt/impl/factored_host_passes.hpp, use
/// the same items' values and finishes where they can, so both give the same bits).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/dtype.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// Elements per partial sum of a vector's ||u||^2.
inline constexpr std::int64_t factored_vector_block = 4096;

/// Blocks of factored_vector_block in `numel` elements (the last one partial).
KOKKOS_INLINE_FUNCTION constexpr std::int64_t factored_blocks(std::int64_t numel) {
  return (numel + factored_vector_block - 1) / factored_vector_block;
}

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

}  // namespace detail
}  // namespace kopt::Impl
