#pragma once
/// \file
/// Adafactor's per-param work (kopt/adafactor_config.hpp), in place on one param's scaled
/// grad g (a tensor stage's fp32 directions, kopt/impl/tensor_stage.hpp): the second-moment
/// statistics (row and column factors of a matrix, or the variance of a vector) updated,
/// and g replaced by the direction u = g / sqrt(max(V, eps1^2)). Every sum is in double in
/// one fixed order (a row or a block in 16 lanes; a column in row order, on the host per
/// block of rows and the blocks in order; the rows and blocks added in order on the host), so
/// the result is the same bits on every thread count (not between host and device spaces,
/// whose column orders differ).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/adafactor_config.hpp>
#include <kopt/compat.hpp>
#include <kopt/tensor.hpp>
#include <string>

namespace kopt::Impl {

/// Elements per partial sum of a vector's ||u||^2.
inline constexpr std::int64_t factored_vector_block = 4096;

/// Floats of per-param state: rows + cols (row_var, col_var) for a matrix, numel
/// (variance) for a param without a shape, none for an empty one.
inline std::int64_t factored_state_size(const Tensor& p) {
  return AdafactorConfig::tensor_state_size(p.is_matrix() ? p.rows : -1, p.cols, p.numel);
}

/// Rows per block of a matrix's statistics pass on the host: at most 64 blocks, each a
/// thread's work, whose column sums are added in block order (a function of the shape
/// alone, so the same bits on every thread count).
inline std::int64_t factored_row_block(std::int64_t rows) {
  return std::max<std::int64_t>(16, (rows + 63) / 64);
}

/// Partial sums for params up to the sizes reserve() saw; allocated before a step.
template <class ExecSpace>
struct FactoredWork {
  using Device = Kokkos::Device<ExecSpace, typename ExecSpace::memory_space>;
  Kokkos::View<double*, Device> sums;
  typename Kokkos::View<double*, Device>::HostMirror sums_host;
  Kokkos::View<double*, Device> column_parts;  ///< host: per row block, its column sums

  /// Grows the scratch to fit `p`. All or nothing.
  void reserve(const std::string& label, const Tensor& p) {
    const std::int64_t n = p.is_matrix()
                               ? std::max(p.rows, p.cols)
                               : (p.numel + factored_vector_block - 1) / factored_vector_block;
    std::int64_t parts = 0;
    if (runs_on_host<ExecSpace> && p.is_matrix())
      parts = (p.rows + factored_row_block(p.rows) - 1) / factored_row_block(p.rows) * p.cols;
    auto s = sums;
    auto h = sums_host;
    auto c = column_parts;
    if (s.extent(0) < static_cast<std::size_t>(n)) {
      s = decltype(s)(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::factored_sums"),
                      static_cast<std::size_t>(n));
      h = Kokkos::create_mirror_view(s);
    }
    if (c.extent(0) < static_cast<std::size_t>(parts))
      c = decltype(c)(Kokkos::view_alloc(Kokkos::WithoutInitializing, label + "::column_parts"),
                      static_cast<std::size_t>(parts));
    sums = s, sums_host = h, column_parts = c;
  }
};

/// The step's floats: b = t^beta2_decay (the statistics' lerp weight) and eps1.
struct FactoredCoefficients {
  float beta;
  float eps1;
};

namespace detail {
/// Lanes of a sum over a row or a block: element k goes to lane k mod sum_lanes, the lanes
/// are added in order, then the tail. A fixed order still (the same bits on every thread
/// count), and one the compiler vectorizes: a single double accumulator is a chain of
/// dependent adds, which left the row sums latency-bound (0.2 of the memory ceiling).
inline constexpr int sum_lanes = 16;

/// Row i: R_i <- R_i + b (mean_j g_ij^2 - R_i); sums(i) = the new R_i.
struct FactorRows {
  const float* g;
  float* row_var;
  double* sums;
  std::int64_t cols;
  float beta;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const float* row = g + i * cols;
    double lane[sum_lanes] = {};
    std::int64_t j = 0;
    for (; j + sum_lanes <= cols; j += sum_lanes)
      for (int k = 0; k < sum_lanes; ++k) {
        const double v = row[j + k];
        lane[k] += v * v;
      }
    double s = 0.0;
    for (int k = 0; k < sum_lanes; ++k) s += lane[k];
    for (; j < cols; ++j) {
      const double v = row[j];
      s += v * v;
    }
    const float r = row_var[i];
    row_var[i] = r + beta * (static_cast<float>(s / static_cast<double>(cols)) - r);
    sums[i] = row_var[i];
  }
};

/// Devices, a thread per column j: C_j <- C_j + b (mean_i g_ij^2 - C_j), summed in row order
/// (a warp reads a row's neighbouring elements together).
struct FactorColumns {
  const float* g;
  float* col_var;
  std::int64_t rows, cols;
  float beta;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    double s = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) {
      const double v = g[i * cols + j];
      s += v * v;
    }
    const float c = col_var[j];
    col_var[j] = c + beta * (static_cast<float>(s / static_cast<double>(rows)) - c);
  }
};

/// Host, a thread per block of rows (factored_row_block): each row's sum as FactorRows
/// does, and the block's sum of each column in row order into parts(block, j), in the same
/// read of the rows (a thread per block of columns, reading the matrix down its columns,
/// ran at half the rate).
struct FactorRowBlock {
  const float* g;
  float* row_var;
  double* sums;
  double* parts;
  std::int64_t rows, cols, block_rows;
  float beta;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t rb) const {
    double* part = parts + rb * cols;
    for (std::int64_t j = 0; j < cols; ++j) part[j] = 0.0;
    const std::int64_t end = rows < (rb + 1) * block_rows ? rows : (rb + 1) * block_rows;
    for (std::int64_t i = rb * block_rows; i < end; ++i) {
      const float* row = g + i * cols;
      double lane[sum_lanes] = {};
      std::int64_t j = 0;
      for (; j + sum_lanes <= cols; j += sum_lanes)
        for (int k = 0; k < sum_lanes; ++k) {
          const double v = row[j + k];
          lane[k] += v * v;
          part[j + k] += v * v;
        }
      double s = 0.0;
      for (int k = 0; k < sum_lanes; ++k) s += lane[k];
      for (; j < cols; ++j) {
        const double v = row[j];
        s += v * v;
        part[j] += v * v;
      }
      const float r = row_var[i];
      row_var[i] = r + beta * (static_cast<float>(s / static_cast<double>(cols)) - r);
      sums[i] = row_var[i];
    }
  }
};

/// Host, column j: C_j <- C_j + b (mean_i g_ij^2 - C_j), its blocks' sums added in order.
struct FactorColumnParts {
  const double* parts;
  float* col_var;
  std::int64_t rows, cols, blocks;
  float beta;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t j) const {
    double s = 0.0;
    for (std::int64_t rb = 0; rb < blocks; ++rb) s += parts[rb * cols + j];
    const float c = col_var[j];
    col_var[j] = c + beta * (static_cast<float>(s / static_cast<double>(rows)) - c);
  }
};

/// Row i of a matrix: g_ij <- g_ij / sqrt(max(R_i C_j / mean, eps1^2)); sums(i) = sum of
/// the new g_ij^2.
struct FactoredDirection {
  float* g;
  const float* row_var;
  const float* col_var;
  double* sums;
  std::int64_t cols;
  float mean, floor;
  KOKKOS_FORCEINLINE_FUNCTION float direction(std::int64_t i, std::int64_t j) const {
    const float v = row_var[i] * col_var[j] / mean;
    const float u = g[i * cols + j] * (1.0f / KOPT_SQRT(v > floor ? v : floor));
    g[i * cols + j] = u;
    return u;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    double lane[sum_lanes] = {};
    std::int64_t j = 0;
    for (; j + sum_lanes <= cols; j += sum_lanes)
      for (int k = 0; k < sum_lanes; ++k) {
        const double u = direction(i, j + k);
        lane[k] += u * u;
      }
    double s = 0.0;
    for (int k = 0; k < sum_lanes; ++k) s += lane[k];
    for (; j < cols; ++j) {
      const double u = direction(i, j);
      s += u * u;
    }
    sums[i] = s;
  }
};

/// Block b of a vector: V_i <- V_i + b (g_i^2 - V_i), g_i <- g_i / sqrt(max(V_i, eps1^2));
/// sums(b) = the sum of the new g_i^2 over the block.
struct VectorDirection {
  float* g;
  float* variance;
  double* sums;
  std::int64_t numel;
  float beta, floor;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t b) const {
    const std::int64_t begin = b * factored_vector_block;
    const std::int64_t end =
        numel - begin < factored_vector_block ? numel : begin + factored_vector_block;
    double lane[sum_lanes] = {};
    std::int64_t i = begin;
    for (; i + sum_lanes <= end; i += sum_lanes)
      for (int k = 0; k < sum_lanes; ++k) {
        const double u = direction(i + k);
        lane[k] += u * u;
      }
    double s = 0.0;
    for (int k = 0; k < sum_lanes; ++k) s += lane[k];
    for (; i < end; ++i) {
      const double u = direction(i);
      s += u * u;
    }
    sums[b] = s;
  }
  KOKKOS_FORCEINLINE_FUNCTION float direction(std::int64_t i) const {
    const float v = variance[i] + beta * (g[i] * g[i] - variance[i]);
    variance[i] = v;
    const float u = g[i] * (1.0f / KOPT_SQRT(v > floor ? v : floor));
    g[i] = u;
    return u;
  }
};
}  // namespace detail

/// Updates the statistics `state` (factored_state_size(p) floats) of param `p` from its
/// scaled grad at `g` and replaces g by its direction u; returns ||u||^2. Runs on
/// ExecSpace's default instance and returns when done; the caller fences its own first.
template <class ExecSpace>
double factored_direction(float* g, const Tensor& p, float* state, const FactoredCoefficients& k,
                          FactoredWork<ExecSpace>& work) {
  using Range = Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>;
  const ExecSpace space{};
  const float floor = k.eps1 * k.eps1;
  std::int64_t parts = 0;
  if (p.numel == 0) return 0.0;
  if (p.is_matrix()) {
    const std::int64_t rows = p.rows, cols = p.cols;
    float* row_var = state;
    float* col_var = state + rows;
    if constexpr (runs_on_host<ExecSpace>) {
      const std::int64_t block = factored_row_block(rows), blocks = (rows + block - 1) / block;
      Kokkos::parallel_for(
          "kopt::adafactor::row_blocks", Range(0, blocks),
          detail::FactorRowBlock{g, row_var, work.sums.data(), work.column_parts.data(), rows, cols,
                                 block, k.beta});
      Kokkos::parallel_for(
          "kopt::adafactor::columns", Range(0, cols),
          detail::FactorColumnParts{work.column_parts.data(), col_var, rows, cols, blocks, k.beta});
    } else {
      Kokkos::parallel_for("kopt::adafactor::rows", Range(0, rows),
                           detail::FactorRows{g, row_var, work.sums.data(), cols, k.beta});
      Kokkos::parallel_for("kopt::adafactor::columns", Range(0, cols),
                           detail::FactorColumns{g, col_var, rows, cols, k.beta});
    }
    Kokkos::deep_copy(space, work.sums_host, work.sums);
    space.fence();
    double mean = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) mean += work.sums_host(i);
    mean /= static_cast<double>(rows);
    const auto divisor = std::max(static_cast<float>(mean), k.eps1);
    Kokkos::parallel_for(
        "kopt::adafactor::direction", Range(0, rows),
        detail::FactoredDirection{g, row_var, col_var, work.sums.data(), cols, divisor, floor});
    parts = rows;
  } else {
    parts = (p.numel + factored_vector_block - 1) / factored_vector_block;
    Kokkos::parallel_for(
        "kopt::adafactor::vector", Range(0, parts),
        detail::VectorDirection{g, state, work.sums.data(), p.numel, k.beta, floor});
  }
  Kokkos::deep_copy(space, work.sums_host, work.sums);
  space.fence();
  double squares = 0.0;
  for (std::int64_t i = 0; i < parts; ++i) squares += work.sums_host(i);
  return squares;
}

}  // namespace kopt::Impl
