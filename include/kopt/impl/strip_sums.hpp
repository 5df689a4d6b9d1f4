#pragma once
/// \file
/// The host measure pass's sums of a strip (kopt/impl/tensor_sums.hpp): the sums of squares
/// of its 8 blocks (block_square_sum's tree, 8 blocks at once) and their exact addition (an
/// ExponentWindow whose 128-bit fixed point is kept per vector lane). The same bits as
/// block_square_sum and ExponentWindow::add block by block; what changes is the count of
/// instructions. One block at a time, the tree's reduction to a scalar and the window's
/// scalar adds took two thirds of LAMB's measure pass (one core of a 2-core AMD EPYC, Zen 5:
/// 16-element blocks, two sums each), and made the pass 1.7x its memory ceiling's time.

#include <cstdint>
#include <cstring>
#include <kopt/impl/exact_sum.hpp>
#include <kopt/impl/lanes.hpp>  // immintrin.h where x86
#include <kopt/impl/measure_strip.hpp>

namespace kopt::Impl {

/// Blocks per strip: a strip's sums come 8 at a time.
inline constexpr int blocks_per_strip = measure_strip_size / tensor_sum_block;
static_assert(blocks_per_strip == 8, "the lane tree and window below take 8 blocks");

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// out[b] = block_square_sum(x + 16 b), b < 8, bitwise: each block's tree as
/// block_square_sum_scalar adds it (e with e + 8, then e + 4, e + 2, e + 1), with the 8
/// blocks side by side in the lanes of each add instead of one block's halves.
KOKKOS_FORCEINLINE_FUNCTION void strip_square_sums(const float* x, double (&out)[8]) {
  using F8 = float __attribute__((vector_size(32)));
  using D8 = double __attribute__((vector_size(64)));
  D8 t[8];  // t[b][e] = x[e]^2 + x[e + 8]^2 of block b (squares of floats: exact in double)
  for (int b = 0; b < 8; ++b) {
    F8 lo_f, hi_f;
    std::memcpy(&lo_f, x + 16 * b, sizeof lo_f);
    std::memcpy(&hi_f, x + 16 * b + 8, sizeof hi_f);
    const D8 lo = __builtin_convertvector(lo_f, D8), hi = __builtin_convertvector(hi_f, D8);
    t[b] = lo * lo + hi * hi;
  }
  D8 u[4];  // u[j]: e + 4 added, blocks 2j (lanes 0-3) and 2j + 1 (lanes 4-7)
  for (int j = 0; j < 4; ++j)
    u[j] = __builtin_shufflevector(t[2 * j], t[2 * j + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(t[2 * j], t[2 * j + 1], 4, 5, 6, 7, 12, 13, 14, 15);
  D8 v[2];  // v[q]: e + 2 added, blocks 4q .. 4q + 3, two lanes each
  for (int q = 0; q < 2; ++q)
    v[q] = __builtin_shufflevector(u[2 * q], u[2 * q + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
           __builtin_shufflevector(u[2 * q], u[2 * q + 1], 2, 3, 6, 7, 10, 11, 14, 15);
  const D8 s = __builtin_shufflevector(v[0], v[1], 0, 2, 4, 6, 8, 10, 12, 14) +
               __builtin_shufflevector(v[0], v[1], 1, 3, 5, 7, 9, 11, 13, 15);
  std::memcpy(out, &s, sizeof out);
}

/// ExponentWindow over 8 values at a time, each lane its own 128-bit fixed point (the same
/// window for all: integer addition is associative, so which lane holds which value does
/// not change the sum). Values out of the window go to ExactSum::add, as there; zeros add
/// nothing either way, so they are not sent there.
struct ExponentWindowLanes {
  using U8 = std::uint64_t __attribute__((vector_size(64)));
  using I8 = std::int64_t __attribute__((vector_size(64)));  ///< lane masks: all ones or zero
  U8 low{}, high{};  ///< lane l's sum, in units of 2^(base - 1075)
  int base = -1;
  int count = 0;

  KOKKOS_FORCEINLINE_FUNCTION void add(const double (&x)[8], ExactSum& acc) {
    U8 bits;
    std::memcpy(&bits, x, sizeof bits);
    if (base < 0 && !start(bits)) {
      for (int l = 0; l < 8; ++l) acc.add(x[l]);
      return;
    }
    const U8 r = (bits >> 52) - static_cast<std::uint64_t>(base);  // wraps below the window
    const I8 in = r < 64u;                                         // within the window
    if (!all_lanes(in | (bits == 0u)))
      for (int l = 0; l < 8; ++l)
        if (in[l] == 0u) acc.add(x[l]);
    const U8 m = ((bits & ((std::uint64_t{1} << 52) - 1u)) | (std::uint64_t{1} << 52)) & U8(in);
    const U8 shift = r & 63u;
    const U8 l = m << shift;
    low += l;
    high += (shift == 0u ? U8{} : m >> ((64u - shift) & 63u)) - U8(low < l);  // a carry: -(-1)
    if (++count == ExponentWindow::capacity) flush(acc);
  }

  KOKKOS_FORCEINLINE_FUNCTION void flush(ExactSum& acc) {
    if (count != 0) {
      for (int l = 0; l < 8; ++l) {
        acc.add_mantissa(low[l], base);
        acc.add_mantissa(high[l], base + 64);
      }
    }
    low = high = U8{};
    count = 0;
  }

 private:
  /// ExponentWindow's window around the first positive finite lane, if any.
  KOKKOS_FORCEINLINE_FUNCTION bool start(const U8& bits) {
    for (int l = 0; l < 8; ++l) {
      const int biased = static_cast<int>(bits[l] >> 52);  // >= 2048 with the sign bit set
      if (biased == 0 || biased >= 2047) continue;
      base = ExponentWindow::base_around(biased);
      return true;
    }
    return false;
  }
  /// Whether every lane of `mask` is set: a test and a branch on x86 (GCC's reduction of
  /// the lanes took 15 instructions, a tenth of the sums' time).
  KOKKOS_FORCEINLINE_FUNCTION static bool all_lanes(const I8& mask) {
#if defined(__AVX512F__)
    __m512i v;
    std::memcpy(&v, &mask, sizeof v);
    return _mm512_test_epi64_mask(v, v) == 0xff;
#elif defined(__AVX__)
    __m256d v[2];
    std::memcpy(v, &mask, sizeof v);
    return (_mm256_movemask_pd(v[0]) & _mm256_movemask_pd(v[1])) == 0xf;
#else
    std::int64_t all = -1;
    for (int l = 0; l < 8; ++l) all &= mask[l];
    return all != 0;
#endif
  }
};
#else
/// Without vector extensions: block_square_sum and ExponentWindow, block by block.
KOKKOS_FORCEINLINE_FUNCTION void strip_square_sums(const float* x, double (&out)[8]) {
  for (int b = 0; b < 8; ++b) out[b] = block_square_sum(x + tensor_sum_block * b);
}
struct ExponentWindowLanes {
  ExponentWindow window;
  KOKKOS_FORCEINLINE_FUNCTION void add(const double (&x)[8], ExactSum& acc) {
    for (int l = 0; l < 8; ++l) window.add(x[l], acc);
  }
  KOKKOS_FORCEINLINE_FUNCTION void flush(ExactSum& acc) { window.flush(acc); }
};
#endif

}  // namespace kopt::Impl
