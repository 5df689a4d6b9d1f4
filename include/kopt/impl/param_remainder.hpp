#pragma once
/// \file
/// An fp32 master held exactly in 4 bytes that are also the model's bf16 param: the param's
/// 16 bits plus a 16-bit remainder (the precision-aware-state issue's `master = remainder`).
///
/// The remainder is the master's low 16 bits; the param is the master rounded to nearest, so
/// the model sees what an fp32 master would give it. Rounding is round to nearest with ties
/// toward the truncated value, not ties to even, and that is forced: a bf16 p that is even is
/// round-to-nearest-even of 65,537 floats (the 65,535 within half an ulp of it, and both
/// ties), one more than 16 bits can tell apart. With ties toward the truncation, each bf16 is
/// the rounding of exactly 65,536 floats, and the low 16 bits name which: the master's high
/// half is the param, less one when the remainder is above 0x8000 (the rounding went up).
/// The param differs from round-to-nearest-even only on an exact tie with an odd high half
/// (one float in 131,072 of uniformly random bits), and by one bf16 ulp; the master itself,
/// and so every later update, is bitwise the fp32-master trajectory.
///
/// NaN: the param is the high half made quiet (as bfloat16::from_float, never Inf, never a
/// carry into the sign); joined back, a quiet NaN master is exact and a signalling one comes
/// back quiet.

#include <cstdint>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// A master's two halves as stored: the bf16 param and the remainder.
struct SplitMaster {
  bfloat16 param;
  std::uint16_t remainder;
};

/// The param's bits of a master with bits `x` (in the low half; std::uint32_t or a lane
/// vector of them): rounded to nearest, ties toward the truncation.
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U split_param_bits(U x) {
  const auto nan = (x & 0x7fffffffu) > 0x7f800000u;
  // Up exactly where the low half exceeds 0x8000: adding 0x7fff carries into the high half
  // then (an add where a compare and a select were). Rounding up from the largest finite
  // magnitude gives Inf, as round-to-nearest-even does; a NaN never rounds (it could carry
  // into the sign) and is quieted instead.
  return (nan ? U(x | 0x00400000u) : U(x + 0x7fffu)) >> 16;
}

/// The master's bits from a param's bits `p` and a remainder `r` (each in the low half, the
/// high half zero).
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U join_master_bits(U p, U r) {
  // Rounded up (r > 0x8000) and not NaN ((p & 0x7fff) <= 0x7f80): each test is bit 16 of a
  // difference that wraps below zero where it fails, so the step down (0x10000) takes no
  // compare and no select.
  const U up = U(0x8000u - r), nan = U(0x7f80u - (p & 0x7fffu));
  return U(p << 16 | r) - (up & ~nan & 0x10000u);
}

/// The param of `master`: rounded to nearest, ties toward the truncation.
KOKKOS_FORCEINLINE_FUNCTION bfloat16 split_param(float master) {
  return bfloat16{static_cast<std::uint16_t>(split_param_bits(float_bits(master)))};
}

/// The remainder of `master`: its low 16 bits.
KOKKOS_FORCEINLINE_FUNCTION std::uint16_t split_remainder(float master) {
  return static_cast<std::uint16_t>(float_bits(master) & 0xffffu);
}

/// The param and remainder that hold `master`. (The update kernels call the two halves
/// apart: GCC does not vectorize a loop that stores this struct's members.)
KOKKOS_FORCEINLINE_FUNCTION SplitMaster split_master(float master) {
  return SplitMaster{split_param(master), split_remainder(master)};
}

/// The master that `split_master` split into (param, remainder).
KOKKOS_FORCEINLINE_FUNCTION float join_master(bfloat16 param, std::uint16_t remainder) {
  return bits_float(join_master_bits(std::uint32_t{param.bits}, std::uint32_t{remainder}));
}

}  // namespace kopt::Impl
