#pragma once
/// \file
/// An exact, order-independent sum of non-negative doubles: the accumulator behind the
/// global grad norm. Adding the same values in any order, split in any way across threads,
/// teams, engines and ranks, gives the same bits: the sum is a fixed-point integer, and
/// integer addition is associative. This is what makes the norm (and every clipped param)
/// identical for every grouping, registration order, placement, thread count and world size.
///
/// The fixed point covers what the norm adds: sums of squares of floats. A float is a
/// multiple of 2^-149, so its square, and any sum of squares, is a multiple of 2^-298; a
/// block of 64 squares is below 2^262. Bits of 2^-298 and up are held in 32-bit digits
/// stored in 64-bit words: an add touches three digits and never carries, so 2^31 adds fit
/// before normalize() must propagate carries (callers normalize per chunk and per join).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

namespace kopt::Impl {

struct ExactSum {
  static constexpr int num_digits = 20;
  /// digit[k] has weight 2^(32 k + lsb_exponent).
  static constexpr int lsb_exponent = -298;
  static constexpr std::uint64_t low32 = 0xffffffffu;
  enum : std::uint32_t { saw_inf = 1, saw_nan = 2 };
  /// add() of a double with this biased exponent or more counts as +Inf (its three digits
  /// would pass the last); add_mantissa() of any m takes every exponent below it.
  static constexpr int overflow_biased = 1075 + lsb_exponent + 32 * (num_digits - 2);

  std::uint64_t digit[num_digits];
  std::uint32_t special;  ///< saw_inf / saw_nan: a non-finite value was added

  KOKKOS_INLINE_FUNCTION ExactSum() : digit{}, special(0) {}

  /// Adds x >= 0 (or +Inf, NaN). Bits of x below 2^-298 are dropped: there are none in
  /// sums of squares of floats. A value too large for the fixed point counts as +Inf.
  KOKKOS_INLINE_FUNCTION void add(double x) {
    if (!(x <= 1.7976931348623157e308)) {  // +Inf or NaN
      special |= x != x ? saw_nan : saw_inf;
      return;
    }
    if (!(x > 0.0)) return;
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    // x > 0: no sign bit. A subnormal double (biased exponent 0) is below 2^-298: dropped.
    add_mantissa((bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52),
                 static_cast<int>(bits >> 52));
  }

  /// Adds m * 2^(biased - 1075) (a double's mantissa with its implicit bit, or a sum of
  /// such mantissas of one exponent; any m < 2^64).
  KOKKOS_INLINE_FUNCTION void add_mantissa(std::uint64_t m, int biased) {
    if (m == 0) return;
    // The position of m's lowest bit in the fixed point.
    int p = biased - 1075 - lsb_exponent;
    if (p < 0) {
      m = -p < 64 ? m >> -p : 0;
      p = 0;
    }
    const int k = p >> 5, s = p & 31;
    if (k + 2 >= num_digits) {
      special |= saw_inf;
      return;
    }
    const std::uint64_t shifted = m << s;  // bits 0..63 of m * 2^s
    digit[k] += shifted & low32;
    digit[k + 1] += shifted >> 32;
    digit[k + 2] += s == 0 ? 0 : m >> (64 - s);  // < 2^32 since s < 32
  }

  KOKKOS_INLINE_FUNCTION void join(const ExactSum& other) {
    for (int k = 0; k < num_digits; ++k) digit[k] += other.digit[k];
    special |= other.special;
  }

  /// Propagates carries: every digit but the last below 2^32 afterwards. The value is
  /// unchanged, and the digits are then a canonical form of it.
  KOKKOS_INLINE_FUNCTION void normalize() {
    for (int k = 0; k + 1 < num_digits; ++k) {
      digit[k + 1] += digit[k] >> 32;
      digit[k] &= low32;
    }
  }

  /// The sum rounded to the nearest double (ties to even); +Inf or NaN if such a value was
  /// added. Host only.
  double value() const;
};

/// Adds many positive doubles of similar size into an ExactSum at about a third of the cost
/// of ExactSum::add (the norm pass adds one per 64 elements; at ExactSum::add's ~19 cycles,
/// memory read-modify-writes at a data-dependent digit, that was 8% of the memory-bound
/// pass): values whose exponent lies in a window of 64 (set by the first positive finite
/// value) are added
/// as integers into a 128-bit fixed point held in registers, which goes into the ExactSum
/// at flush(). Exact, so the result is the same as adding each value. Values outside the
/// window, zeros and non-finite values take ExactSum::add.
struct ExponentWindow {
  static constexpr int width = 64;
  /// A mantissa (< 2^53) shifted by < 64 is below 2^116: 2^11 of them fit in 128 bits.
  static constexpr int capacity = 2048;

  std::uint64_t low = 0, high = 0;  ///< the sum, in units of 2^(base - 1075)
  /// The biased exponent of the window's bottom. The window lies in [1, overflow_biased):
  /// only finite, normal values that add() takes without overflow, and the top half of the
  /// 128 bits added at base + 64 never overflows either.
  int base = -1;
  int count = 0;

  /// The window's bottom around a positive finite normal value's biased exponent.
  KOKKOS_INLINE_FUNCTION static int base_around(int biased) {
    const int centred = biased - width / 2, top = ExactSum::overflow_biased - 1 - width;
    return centred < 1 ? 1 : centred > top ? top : centred;
  }

  KOKKOS_INLINE_FUNCTION void add(double x, ExactSum& acc) {
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const int biased = static_cast<int>(bits >> 52);  // >= 2048 with the sign bit set
    if (base < 0) {  // the window around the first positive finite value
      if (biased == 0 || biased >= 2047) {
        acc.add(x);
        return;
      }
      base = base_around(biased);
    }
    const auto r = static_cast<unsigned>(biased - base);
    if (r >= unsigned{width}) {
      acc.add(x);
      return;
    }
    const std::uint64_t m = (bits & ((std::uint64_t{1} << 52) - 1)) | (std::uint64_t{1} << 52);
    const std::uint64_t l = m << r;
    low += l;
    high += (r == 0 ? 0 : m >> (64 - r)) + (low < l ? 1 : 0);
    if (++count == capacity) flush(acc);
  }

  KOKKOS_INLINE_FUNCTION void flush(ExactSum& acc) {
    // Bits of the sum below 2^-298 are zeros (every value added is a multiple of it), so
    // add_mantissa's shift drops nothing.
    if (count != 0) {
      acc.add_mantissa(low, base);
      acc.add_mantissa(high, base + 64);
    }
    low = high = 0;
    count = 0;
  }
};

}  // namespace kopt::Impl
