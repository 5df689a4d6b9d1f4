#pragma once
/// \file
/// DType::q8 state arrays: blockwise 8-bit codes, as bitsandbytes' and torchao's 8-bit
/// optimizers keep Adam's moments, with a map chosen to be computed rather than searched.
///
/// Layout: blocks of q8_block = 256 elements (bitsandbytes' and torchao's block; one host
/// staging block, one GPU warp), each 256 code bytes followed by the block's scale, a
/// float power of two: q8_block_bytes = 260 bytes for 256 elements, 1.016 bytes each.
///
/// The map: an element is code value x scale, the code an 8-bit float with a 4-bit exponent
/// (2^-14 ... 2^0, and subnormals down to 2^-(14 + M)):
/// - signed arrays (exp_avg): 1 sign bit, 4 exponent bits, M = 3 mantissa bits (E4M3);
/// - non-negative arrays (exp_avg_sq, max_exp_avg_sq) hold their square roots, unsigned,
///   with M = 4 (E4M4).
/// Why: a moment's magnitudes in one block span orders of magnitude, so a float code keeps
/// the same relative precision (1/16 of an element at worst for E4M3, 1/32 for E4M4) across
/// 5 decades below the block's largest element, where a linear map would flush every element
/// 256x smaller than it to zero. The square root halves the second moment's decades, so its
/// codes reach as far below its largest element as the first moment's (and a v that would
/// flush to zero under an m that does not, dividing by eps alone, needs a grad 2^-18 of its
/// block's largest). A power-of-two scale makes the scaling exact both ways: decoding and
/// encoding again gives the same values, so a checkpoint of decoded values resumes bitwise.
/// Encoding is integer arithmetic on the float's bits, rounding to nearest even, the same on
/// every backend, with no table to search (bitsandbytes' dynamic map needs a binary search
/// per element, which on a CPU costs more than the memory traffic it saves).
/// Stochastic rounding (StateStorage::state_rounding): a value between two codes takes the
/// upper one with probability (its distance above the lower) / (the codes' distance), the
/// distances of stored values (for root arrays, of the squares), so the decoded value is
/// right in expectation; the odds are resolved to 16 random bits.
///
/// Scale: 2^E with E the least integer such that the block's largest magnitude is at most
/// the largest code value (1.875, E4M3; 1.9375, E4M4) times 2^E, E in [-126, 127]. A block
/// with a NaN or Inf gets a NaN scale: every element of it decodes to NaN.

#include <Kokkos_Macros.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/q8_layout.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// The block holding element i of a q8 array whose element 0 starts a block at `base`.
KOKKOS_FORCEINLINE_FUNCTION unsigned char* q8_block_of(void* base, std::int64_t i) {
  return static_cast<unsigned char*>(base) + i / q8_block * q8_block_bytes;
}
KOKKOS_FORCEINLINE_FUNCTION float q8_scale_of(const unsigned char* block) {
  float s;
  std::memcpy(&s, block + q8_block, sizeof s);
  return s;
}

/// The code map of an array: `Root` for a non-negative array kept as its square roots.
template <bool Root>
struct Q8Map {
  static constexpr unsigned mantissa = Root ? 4u : 3u;
  static constexpr unsigned drop = 23u - mantissa;     ///< float mantissa bits dropped
  static constexpr unsigned top = Root ? 255u : 127u;  ///< the largest magnitude code
  static constexpr std::uint32_t top_mantissa = (top & ((1u << mantissa) - 1u)) << drop;

  /// The bits of the value of magnitude code c (< 2^(4 + mantissa)), in integer arithmetic
  /// alone: GCC will not if-convert a float operation (it might trap), and the decoding loop
  /// with one ran unvectorized, 8x slower.
  KOKKOS_FORCEINLINE_FUNCTION static std::uint32_t value_bits(std::uint32_t c) {
    const std::uint32_t e = c >> mantissa, f = c & ((1u << mantissa) - 1u);
    // A subnormal code, f x 2^-(14 + mantissa), is a normal float: f's leading bit p sets
    // its exponent, the bits below it its mantissa.
    const std::uint32_t p = (f >= 2u ? 1u : 0u) + (f >= 4u ? 1u : 0u) + (f >= 8u ? 1u : 0u);
    const std::uint32_t sub = ((113u + p - mantissa) << 23) | ((f << (23u - p)) & 0x7fffffu);
    return e != 0u ? ((e + 112u) << 23) | (f << drop) : (f != 0u ? sub : 0u);
  }
  KOKKOS_FORCEINLINE_FUNCTION static float value(std::uint32_t c) {
    return bits_float(value_bits(c));
  }

  /// The nearest magnitude code to y >= 0 (ties to even), at most `top`. Normal codes
  /// (y >= 2^-14): y's bits with the dropped ones rounded to nearest even in integer
  /// arithmetic (a carry moves into the exponent, as it should). Subnormal codes: y added to
  /// 2^(9 - mantissa), whose ulp is the subnormal step, rounds y to a multiple of that step
  /// (to even on a tie), and the sum's low bits count the steps. Both are computed and one
  /// is picked by a mask, so the loops around vectorize.
  KOKKOS_FORCEINLINE_FUNCTION static std::uint32_t code(float y) {
    const std::uint32_t ay = float_bits(y) & 0x7fffffffu;
    const std::uint32_t half = 1u << (drop - 1u);
    const std::uint32_t norm =
        ((ay + (half - 1u) + ((ay >> drop) & 1u)) >> drop) - (112u << mantissa);
    constexpr float magic = static_cast<float>(1u << (9u - mantissa));
    const std::uint32_t sub = float_bits(bits_float(ay) + magic) - float_bits(magic);
    const std::uint32_t tiny = 0u - (ay < 0x38800000u ? 1u : 0u);  // all ones below 2^-14
    const std::uint32_t c = (sub & tiny) | (norm & ~tiny);
    return c > top ? top : c;
  }

  /// |y|'s code rounded towards zero, at most `top`: y's dropped bits cut (normal codes),
  /// or y in subnormal steps, truncated (an exact power-of-two scaling).
  KOKKOS_FORCEINLINE_FUNCTION static std::uint32_t code_down(float y) {
    const std::uint32_t ay = float_bits(y) & 0x7fffffffu;
    const bool tiny = ay < 0x38800000u;
    const std::uint32_t norm = (ay >> drop) - (112u << mantissa);
    constexpr float per_step = static_cast<float>(1u << (14u + mantissa));
    const auto sub = static_cast<std::uint32_t>(bits_float(tiny ? ay : 0u) * per_step);
    const std::uint32_t c = tiny ? sub : norm;
    return c > top ? top : c;
  }

  /// The 16-bit threshold of y between the values lo < hi of neighbouring codes: floor(2^16
  /// t), t = (y - lo) / (hi - lo), of the squares for a root array (its stored values are
  /// squared: rounding them so keeps the decoded value right in expectation). 0 for NaN.
  KOKKOS_FORCEINLINE_FUNCTION static std::uint32_t threshold(float y, float lo, float hi) {
    const float t = Root ? (y * y - lo * lo) / (hi * hi - lo * lo) : (y - lo) / (hi - lo);
    const float scaled = t * 65536.0f;
    return scaled > 0.0f ? static_cast<std::uint32_t>(scaled < 65536.0f ? scaled : 65536.0f) : 0u;
  }

  /// |y|'s code rounded stochastically: code_down(y), one more when `bits` (uniform in
  /// [0, 65536)) is below its threshold; at most `top`.
  KOKKOS_FORCEINLINE_FUNCTION static std::uint32_t code_stochastic(float y, std::uint32_t bits) {
    const float a = bits_float(float_bits(y) & 0x7fffffffu);
    const std::uint32_t c = code_down(a);
    const std::uint32_t up = bits < threshold(a, value(c), value(c + 1u)) ? 1u : 0u;
    return c + up > top ? top : c + up;
  }

  /// The scale of a block whose largest magnitude (stored value: the root for Root arrays)
  /// has bits `amax` (sign cleared): the least 2^E with amax <= top value x 2^E.
  KOKKOS_FORCEINLINE_FUNCTION static float scale(std::uint32_t amax) {
    const std::uint32_t e = amax >> 23;  // biased exponent; E = e - 127 or one more
    std::uint32_t biased = e + ((amax & 0x7fffffu) > top_mantissa ? 1u : 0u);
    biased = biased < 1u ? 1u : (biased > 254u ? 254u : biased);
    return amax >= 0x7f800000u ? bits_float(0x7fc00000u) : bits_float(biased << 23);
  }
};

/// Decodes element j of a block.
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION float q8_decode(std::uint32_t code, float scale) {
  if constexpr (Root) {
    const float r = Q8Map<true>::value(code) * scale;
    return r * r;
  } else {  // the sign bit moved to the float's: a select would not vectorize
    return bits_float(Q8Map<false>::value_bits(code & 0x7fu) | ((code & 0x80u) << 24)) * scale;
  }
}

/// The code of x in a block of scale `scale` (inv = 1 / scale, exact: a power of two).
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION std::uint8_t q8_encode(float x, float inv) {
  if constexpr (Root) {
    return static_cast<std::uint8_t>(Q8Map<true>::code(KOPT_SQRT(x < 0.0f ? 0.0f : x) * inv));
  } else {
    const std::uint32_t sign = (float_bits(x) >> 24) & 0x80u;
    return static_cast<std::uint8_t>(sign | Q8Map<false>::code(x * inv));
  }
}

/// q8_encode rounded stochastically with the 16 random bits `bits`.
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION std::uint8_t q8_encode_stochastic(float x, float inv,
                                                              std::uint32_t bits) {
  if constexpr (Root) {
    const float y = KOPT_SQRT(x < 0.0f ? 0.0f : x) * inv;
    return static_cast<std::uint8_t>(Q8Map<true>::code_stochastic(y, bits));
  } else {
    const std::uint32_t sign = (float_bits(x) >> 24) & 0x80u;
    return static_cast<std::uint8_t>(sign | Q8Map<false>::code_stochastic(x * inv, bits));
  }
}

/// The scale of a block of values whose largest magnitude (the largest value, for Root
/// arrays, whose elements are never negative) has bits `amax`.
template <bool Root>
KOKKOS_FORCEINLINE_FUNCTION float q8_scale(std::uint32_t amax) {
  if constexpr (Root) return Q8Map<true>::scale(float_bits(KOPT_SQRT(bits_float(amax))));
  return Q8Map<false>::scale(amax);
}

/// out[j] = element j of `block`, j < n (n <= q8_block).
template <bool Root>
KOPT_LOOP_FUNCTION void q8_decode_run(const unsigned char* KOPT_RESTRICT block,
                                      float* KOPT_RESTRICT out, int n) {
  const float scale = q8_scale_of(block);
  for (int j = 0; j < n; ++j) out[j] = q8_decode<Root>(block[j], scale);
}

/// Stores in[0, n) as `block` (n <= q8_block): the scale of their largest magnitude, then
/// each code, to nearest, or (r not null: the array's rounding) stochastically with the bits
/// of element i + j. Codes past n (a param's last, partial block) are left as they are.
template <bool Root>
KOPT_LOOP_FUNCTION void q8_encode_run(const float* KOPT_RESTRICT in,
                                      unsigned char* KOPT_RESTRICT block, int n,
                                      const ChunkRounding* r = nullptr, std::int64_t i = 0) {
  std::uint32_t amax = 0;  // bit patterns of magnitudes order as the values, NaN above Inf
  for (int j = 0; j < n; ++j) {
    const std::uint32_t a = float_bits(in[j]) & 0x7fffffffu;
    amax = a > amax ? a : amax;
  }
  const float scale = q8_scale<Root>(amax), inv = 1.0f / scale;
  if (r == nullptr)
    for (int j = 0; j < n; ++j) block[j] = q8_encode<Root>(in[j], inv);
  else
    for (int j = 0; j < n; ++j) block[j] = q8_encode_stochastic<Root>(in[j], inv, r->bits(i + j));
  std::memcpy(block + q8_block, &scale, sizeof scale);
}

/// Decode or encode a run with the map of `root` (a run-time flag, the same for a launch).
KOKKOS_INLINE_FUNCTION void q8_decode_run(bool root, const unsigned char* block, float* out,
                                          int n) {
  root ? q8_decode_run<true>(block, out, n) : q8_decode_run<false>(block, out, n);
}
KOKKOS_INLINE_FUNCTION void q8_encode_run(bool root, const float* in, unsigned char* block, int n,
                                          const ChunkRounding* r = nullptr, std::int64_t i = 0) {
  root ? q8_encode_run<true>(in, block, n, r, i) : q8_encode_run<false>(in, block, n, r, i);
}

}  // namespace kopt::Impl
