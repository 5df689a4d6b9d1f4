#pragma once
/// \file
/// Reproducible stochastic rounding of an update into a bf16 param (MasterStorage::none with
/// Rounding::stochastic), and of bf16 and f16 state arrays (StateStorage::state_rounding).
///
/// The random bits of an element are a hash of (seed, param name, step count, the element's
/// index in the whole tensor), nothing else: not the thread, the chunk, the backend, the
/// shard or the world size, so every one of those gives the same params bitwise. The hash
/// runs in two parts: a 64-bit mix of (seed, name) once per param and of that with the step
/// once per chunk (RoundingKey), and per element a 32-bit mix of the key with the index,
/// which vectorizes (32-bit multiplies) where a 64-bit one would not on AVX2.

#include <cstdint>
#include <kopt/storage_types.hpp>
#include <string>

namespace kopt::Impl {

/// SplitMix64's finalizer: every input bit moves every output bit.
KOKKOS_FORCEINLINE_FUNCTION constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// A param's random stream: FNV-1a of its name, mixed with the seed. Names are the keys kopt
/// knows params by, the same on every rank and in every engine.
inline std::uint64_t rounding_stream(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed));
}

/// What the elements of one param at one step share.
struct RoundingKey {
  std::uint32_t low;   ///< mixed with an element index's low 32 bits
  std::uint32_t high;  ///< and with its high 32 bits
};

KOKKOS_FORCEINLINE_FUNCTION RoundingKey rounding_key(std::uint64_t stream, std::int64_t step) {
  const std::uint64_t k = mix64(stream + mix64(static_cast<std::uint64_t>(step)));
  return RoundingKey{static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
}

/// rounding_hash's factors of an index's two words, and its finalizer (rounding_mix) of
/// their sum: apart, so that the host lanes form the sum from one product per vector instead
/// of two per lane (kopt/impl/paired_lanes.hpp's stochastic_lanes).
inline constexpr std::uint32_t rounding_low_factor = 0x9e3779b9u;
inline constexpr std::uint32_t rounding_high_factor = 0x85ebca6bu;

template <class U>
KOKKOS_FORCEINLINE_FUNCTION U rounding_mix(U x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x >> 16;
}

/// 16 random bits for the global element whose index has low and high 32 bits `low`, `high`
/// (Chris Wellons' "lowbias32" on the key and index; its high half, the better mixed): for
/// std::uint32_t, and lane by lane for kopt/impl/lanes.hpp's vectors of them.
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U rounding_hash(RoundingKey key, U low, U high) {
  return rounding_mix(
      U(key.low ^ (low * rounding_low_factor) ^ (high + key.high) * rounding_high_factor));
}

/// 16 random bits for global element `index`.
KOKKOS_FORCEINLINE_FUNCTION std::uint32_t rounding_bits(RoundingKey key, std::int64_t index) {
  const auto i = static_cast<std::uint64_t>(index);
  return rounding_hash(key, static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32));
}

/// A state array's key: its param's, salted by the array's index, so that an element's
/// param and each of its arrays draw bits of their own (the finalizer spreads the salt's
/// bits over all 16).
KOKKOS_FORCEINLINE_FUNCTION RoundingKey array_rounding_key(RoundingKey key, int array) {
  const std::uint32_t salt = 0x632be5abu * static_cast<std::uint32_t>(array + 1);
  return RoundingKey{key.low ^ salt, key.high + salt};
}

/// Where a chunk's elements get their random bits (stochastic rounding; unused otherwise):
/// the key of its param and step, and the index of the slot's element 0 in the whole tensor.
struct ChunkRounding {
  RoundingKey key{0, 0};
  std::int64_t first = 0;
  KOKKOS_FORCEINLINE_FUNCTION std::uint32_t bits(std::int64_t i) const {
    return rounding_bits(key, first + i);
  }
  /// The random bits of element i of state array k.
  KOKKOS_FORCEINLINE_FUNCTION std::uint32_t array_bits(int k, std::int64_t i) const {
    return rounding_bits(array_rounding_key(key, k), first + i);
  }
  /// The rounding of state array k's elements.
  KOKKOS_FORCEINLINE_FUNCTION ChunkRounding of_array(int k) const {
    return ChunkRounding{array_rounding_key(key, k), first};
  }
};

/// `value` rounded to a bf16 neighbour: up (in magnitude) when its low 16 bits plus `bits`
/// (uniform in [0, 65536)) carry, i.e. with probability low / 65536, so the expected result
/// is `value` exactly. Infinities stay; NaN becomes quiet NaN as bfloat16::from_float does;
/// a value above the largest finite bf16 may round to Inf, as it may to nearest.
/// On the float's bits `x`, in the low half (std::uint32_t, or lane vectors of them).
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U stochastic_bf16_bits(U x, U bits) {
  const auto nan = (x & 0x7fffffffu) > 0x7f800000u;
  const U rounded = (x + bits) >> 16;
  return nan ? U((x >> 16) | 0x0040u) : rounded;
}
KOKKOS_FORCEINLINE_FUNCTION bfloat16 round_stochastic(float value, std::uint32_t bits) {
  return bfloat16{static_cast<std::uint16_t>(stochastic_bf16_bits(float_bits(value), bits))};
}

/// `value` (its float bits `x`) rounded to an f16 neighbour: up in magnitude when `bits`
/// (uniform in [0, 65536)) is below t = floor(65536 d / ulp), d its distance from the
/// neighbour below, so with probability d / ulp to 16 bits (exact in the normal range, where
/// 13 bits are dropped; a subnormal result drops more, and values below 2^-40 round to 0).
/// Past 65504 a value may round up to Inf, as it may to nearest; Inf stays Inf; NaN becomes
/// the quiet NaN float16::from_float gives. Branch-free selects (std::uint32_t, or lane
/// vectors of them), so loops around it vectorize.
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U stochastic_f16_bits(U x, U bits) {
  const U zero{};
  const U one = zero + 1u;
  const U sign = (x >> 16) & 0x8000u;
  const U ax = x & 0x7fffffffu;
  const U e = ax >> 23;
  const auto normal = ax >= 0x38800000u;  // 2^-14, the least normal f16
  // Normal range: rebias the exponent (127 -> 15); the 13 dropped bits give t.
  const U norm = ((normal ? ax : zero + 0x38800000u) - (112u << 23)) >> 13;
  const U norm_t = (ax & 0x1fffu) << 3;
  // Subnormal range: mant24 * 2^(e - 150) in units of 2^-24 is mant24 >> (126 - e); every
  // shift kept in [14, 40] off this branch too (the selects compute both sides).
  const U mant24 = (ax & 0x7fffffu) | (e != 0u ? zero + 0x800000u : zero);
  const U shift = e > 112u ? zero + 14u : (e < 86u ? zero + 40u : 126u - e);
  const U cut = shift < 24u ? shift : zero + 24u;
  const U sub = mant24 >> cut;
  const U dropped = mant24 & ((one << cut) - 1u);
  const U sub_t =
      (dropped << (shift < 16u ? 16u - shift : zero)) >> (shift > 16u ? shift - 16u : zero);
  U r = (normal ? norm : sub) + (bits < (normal ? norm_t : sub_t) ? one : zero);
  r = r > 0x7c00u ? zero + 0x7c00u : r;
  const auto nan = ax > 0x7f800000u;
  return nan ? U(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)) : U(sign | r);
}
KOKKOS_FORCEINLINE_FUNCTION float16 round_stochastic_f16(float value, std::uint32_t bits) {
  return float16{static_cast<std::uint16_t>(stochastic_f16_bits(float_bits(value), bits))};
}

}  // namespace kopt::Impl
