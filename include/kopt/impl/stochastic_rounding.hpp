#pragma once
/// \file
/// Reproducible stochastic rounding of an update into a bf16 param (MasterStorage::none with
/// Rounding::stochastic).
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

}  // namespace kopt::Impl
