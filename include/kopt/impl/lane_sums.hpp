#pragma once
/// \file
/// Sums of squares over a row or a block of elements, for the tensor stages' per-param
/// reductions (Adafactor's statistics and norms, kopt/impl/factored_moments.hpp; ||p||,
/// kopt/impl/whole_param_norm.hpp). One fixed order: element j goes to lane j mod sum_lanes,
/// the lanes are added in order, then the tail past the last whole group of sum_lanes, in
/// order; every square in double. The same bits on every thread count, and one the compiler
/// vectorizes: a single double accumulator is a chain of dependent adds, which left the row
/// sums latency-bound (0.2 of the memory ceiling).
///
/// The lanes can be fed a strip at a time (whole groups), with the same result: a host pass
/// over a 16-bit grad widens each strip to fp32 first (widened_strips). Summed straight from
/// the 16-bit values, GCC's code for the widening and the squares was compute-bound: 3-5x a
/// plain read of the grad on a 2-core EPYC, where the fp32 passes ran at 1.1-1.2x.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/narrow_state.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// Lanes of a sum.
inline constexpr int sum_lanes = 16;
/// How far ahead a sum asks the cache for each of the `Streams` streams it reads, in
/// elements of T: read_prefetch_bytes in all. Adafactor's statistics read four rows at a
/// time, and asked for 8 KiB ahead of each, they took 4.6 ms (8192 x 8192 fp32, 2 threads,
/// a plain read 3.3); 2 KiB of each, 3.9 (1 KiB: 4.8; 4 KiB: 4.3).
template <class T, int Streams = 1>
inline constexpr std::int64_t lane_prefetch = read_prefetch_bytes / Streams /
                                              static_cast<std::int64_t>(sizeof(T));
/// Elements a host pass widens to fp32 at a time (whole groups of sum_lanes).
inline constexpr int lane_strip = 256;

/// Adds value(j)^2 to lane[j mod sum_lanes] for j in [0, n), n a multiple of sum_lanes;
/// value(j) a float (it may add its square elsewhere too). Asks the cache for `stream` ahead,
/// if given: without, the norm pass read the grad at 0.55 of a plain read's rate.
template <class Value, class T = float>
KOKKOS_FORCEINLINE_FUNCTION void add_lane_squares(std::int64_t n, const Value& value,
                                                  double (&lane)[sum_lanes],
                                                  const T* stream = nullptr) {
  for (std::int64_t j = 0; j < n; j += sum_lanes) {
    if (stream != nullptr) prefetch_ahead(stream, j + lane_prefetch<T>);
    KOPT_VECTOR_LOOP
    for (int k = 0; k < sum_lanes; ++k) {
      const double v = value(j + k);
      lane[k] += v * v;
    }
  }
}

/// The lanes added in order, then value(j)^2 for j in [0, n) (the tail), in order.
template <class Value>
KOKKOS_FORCEINLINE_FUNCTION double finish_lane_squares(const double (&lane)[sum_lanes],
                                                       std::int64_t n, const Value& value) {
  double s = 0.0;
  for (int k = 0; k < sum_lanes; ++k) s += lane[k];
  for (std::int64_t j = 0; j < n; ++j) {
    const double v = value(j);
    s += v * v;
  }
  return s;
}

/// The sum of value(j)^2 over j in [0, n), in the lanes' order.
template <class Value, class T = float>
KOKKOS_FORCEINLINE_FUNCTION double lane_square_sum(std::int64_t n, const Value& value,
                                                   const T* stream = nullptr) {
  double lane[sum_lanes] = {};
  const std::int64_t whole = n / sum_lanes * sum_lanes;
  add_lane_squares(whole, value, lane, stream);
  return finish_lane_squares(lane, n - whole, [&](std::int64_t j) { return value(whole + j); });
}

/// Host: body(x, at, n) for each strip [at, at + n) of [0, whole) (whole a multiple of
/// sum_lanes), x[q] = rows[q]'s elements of the strip widened to fp32, q < R; the rows asked
/// for ahead.
template <int R, class T, class Body>
KOKKOS_INLINE_FUNCTION void widened_strips(const T* const (&rows)[R], std::int64_t whole,
                                           const Body& body) {
  alignas(64) float strip[R][lane_strip];
  const float* x[R];
  for (int q = 0; q < R; ++q) x[q] = strip[q];
  for (std::int64_t at = 0; at < whole; at += lane_strip) {
    // Not std::min, a host function to nvcc (it would need --expt-relaxed-constexpr).
    const std::int64_t left = whole - at;
    const auto n = static_cast<int>(left < lane_strip ? left : lane_strip);
    for (int q = 0; q < R; ++q) {
      for (int e = 0; e < n; e += 64 / static_cast<int>(sizeof(T)))
        prefetch_ahead(rows[q], at + e + lane_prefetch<T, R>);
      widen_run(rows[q] + at, strip[q], n);
    }
    body(x, at, n);
  }
}

}  // namespace kopt::Impl
