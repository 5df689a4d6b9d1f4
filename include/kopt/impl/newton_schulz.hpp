#pragma once
/// \file
/// Muon's orthogonalization (kopt/muon_config.hpp): the Newton-Schulz iteration on one
/// row-major matrix in place, in fp32, its products on KokkosBlas::gemm (Kokkos Kernels:
/// its own kernels, or the BLAS it was built with). The Frobenius norm that scales the
/// matrix first is summed in double, row by row in a fixed order, so the result is the same
/// bits however many threads run it.

#include <KokkosBlas3_gemm.hpp>
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/tensor.hpp>
#include <string>
#include <utility>

namespace kopt::Impl {

/// The iteration's floats: X <- a X + (b A + c A A) X with A = X X^T, `steps` times, after
/// X = U / max(||U||_F, eps).
struct NewtonSchulzCoefficients {
  float a, b, c;
  double eps;
  int steps;
};

/// Scratch for matrices up to the sizes reserve() saw; allocated before a step, never in it.
template <class ExecSpace>
struct NewtonSchulzWork {
  using Device = Kokkos::Device<ExecSpace, typename ExecSpace::memory_space>;
  Kokkos::View<float*, Device> next;  ///< the next X: rows x cols
  Kokkos::View<float*, Device> gram;  ///< A and the polynomial B: k x k each, k the smaller side
  Kokkos::View<double*, Device> row_sums;
  typename Kokkos::View<double*, Device>::HostMirror row_sums_host;

  /// Grows the scratch to fit a rows x cols matrix. All or nothing.
  void reserve(const std::string& label, std::int64_t rows, std::int64_t cols) {
    const auto k = static_cast<std::size_t>(std::min(rows, cols));
    const auto grow = [&](auto& view, std::size_t n, const char* what) {
      if (view.extent(0) >= n) return;
      std::decay_t<decltype(view)> bigger(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, label + what), n);
      view = bigger;
    };
    auto next_ = next;
    auto gram_ = gram;
    auto sums_ = row_sums;
    grow(next_, static_cast<std::size_t>(rows * cols), "::ns_next");
    grow(gram_, 2 * k * k, "::ns_gram");
    grow(sums_, static_cast<std::size_t>(rows), "::ns_row_sums");
    auto sums_host =
        sums_.extent(0) == row_sums.extent(0) ? row_sums_host : Kokkos::create_mirror_view(sums_);
    next = next_, gram = gram_, row_sums = sums_, row_sums_host = sums_host;
  }
  /// Grows the scratch to fit the matrix `p`.
  void reserve(const std::string& label, const Tensor& p) { reserve(label, p.rows, p.cols); }
  std::size_t bytes() const { return view_bytes(next, gram, row_sums); }
};

namespace detail {
template <class Device>
using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Device, Kokkos::MemoryUnmanaged>;

/// sum of x^2 over each row, in double, in element order.
template <class Device>
struct RowSumsOfSquares {
  Matrix<Device> x;
  Kokkos::View<double*, Device> sums;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    double s = 0.0;
    for (std::int64_t j = 0; j < static_cast<std::int64_t>(x.extent(1)); ++j) {
      const double v = x(i, j);
      s += v * v;
    }
    sums(i) = s;
  }
};

struct Divide {
  float* x;
  float divisor;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { x[i] = x[i] / divisor; }
};
}  // namespace detail

/// Orthogonalizes the rows x cols matrix at `x` (row-major, in ExecSpace's memory) in place.
/// Runs on ExecSpace's default instance (Kokkos Kernels 3.x's gemm takes none) and returns
/// when it is done; the caller fences its own instance first.
template <class ExecSpace>
void newton_schulz(float* x, std::int64_t rows, std::int64_t cols,
                   const NewtonSchulzCoefficients& k, NewtonSchulzWork<ExecSpace>& work) {
  using Device = typename NewtonSchulzWork<ExecSpace>::Device;
  using Matrix = detail::Matrix<Device>;
  if (rows == 0 || cols == 0) return;
  const ExecSpace space{};
  Matrix u(x, rows, cols);
  Kokkos::parallel_for("kopt::newton_schulz::norm",
                       Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(0, rows),
                       detail::RowSumsOfSquares<Device>{u, work.row_sums});
  Kokkos::deep_copy(space, work.row_sums_host, work.row_sums);
  space.fence();
  double sum = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) sum += work.row_sums_host(i);
  const auto divisor = static_cast<float>(std::max(std::sqrt(sum), k.eps));
  Kokkos::parallel_for(
      "kopt::newton_schulz::scale",
      Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(0, rows * cols),
      detail::Divide{x, divisor});
  // Wide (rows <= cols): A = X X^T, X <- a X + B X. Tall: the same on X^T, written without
  // a transpose: A = X^T X, X <- a X + X B^T.
  const bool wide = rows <= cols;
  const std::int64_t side = wide ? rows : cols;
  Matrix cur = u;
  Matrix nxt(work.next.data(), rows, cols);
  Matrix gram(work.gram.data(), side, side);
  Matrix poly(work.gram.data() + side * side, side, side);
  for (int it = 0; it < k.steps; ++it) {
    KokkosBlas::gemm(wide ? "N" : "T", wide ? "T" : "N", 1.0f, cur, cur, 0.0f, gram);
    Kokkos::deep_copy(poly, gram);
    KokkosBlas::gemm("N", "N", k.c, gram, gram, k.b, poly);
    Kokkos::deep_copy(nxt, cur);
    if (wide)
      KokkosBlas::gemm("N", "N", 1.0f, poly, cur, k.a, nxt);
    else
      KokkosBlas::gemm("N", "T", 1.0f, cur, poly, k.a, nxt);
    std::swap(cur, nxt);
  }
  if (cur.data() != x) Kokkos::deep_copy(u, cur);
  space.fence();
}

}  // namespace kopt::Impl
