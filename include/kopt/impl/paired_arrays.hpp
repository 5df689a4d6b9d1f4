#pragma once
/// \file
/// The state arrays of paired_lanes (kopt/impl/paired_lanes.hpp), read as pairs of lane
/// vectors (the even elements, the odd ones) and written back the same way:
/// - Bf16Pairs: every kept array bf16 (the 18- and 14-byte AdamW steps), rounded to
///   nearest even, or stochastically (StateStorage::state_rounding);
/// - MixedPairs: each array in its own dtype, bf16, f16 or f32, known at run time (a
///   switch per array and vector that the branch predictor gets right every time), rounded
///   to nearest: bf16 m beside an fp32 v, f16 m and v. These ran fused_lanes, whose 16-bit
///   param and remainder streams each took a shuffle to widen and two to narrow; here every
///   16-bit stream is pair words, and an fp32 array costs a permute per vector each way.

#include <cstdint>
#include <kopt/dtype.hpp>
#include <kopt/impl/narrow_state.hpp>  // StateDTypes
#include <kopt/impl/paired_words.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// bf16 arrays: `Stochastic` stores draw array k's bits from r.of_array(k) (the staged
/// loop's bits, kopt/impl/narrow_state.hpp), else round to nearest even.
template <bool Stochastic>
struct Bf16Pairs {
  bfloat16* at[3];
  ChunkRounding r;

  KOKKOS_FORCEINLINE_FUNCTION void load(int k, std::int64_t i, LaneF (&a)[2]) const {
    bf16_pair_floats(load_lanes(at[k] + i), a);
  }
  /// Finite: no value of `a` is NaN (bf16_finite_pairs; stochastic stores take no such test).
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, const LaneF (&a)[2]) const {
    if constexpr (Stochastic) {
      const ChunkRounding rk = r.of_array(k);
      store_lanes(at[k] + i, pair_words(stochastic_lanes(float_bits(a[0]), rk, i, 2, 0),
                                        stochastic_lanes(float_bits(a[1]), rk, i, 2, 1)));
    } else {
      store_lanes(at[k] + i,
                  Finite ? bf16_finite_pairs(a[0], a[1]) : bf16_nearest_pairs(a[0], a[1]));
    }
  }
  /// The line of array k that holds element i (2 * lane_count elements: at most a line).
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    prefetch_ahead(at[k], i);
  }
};

/// Arrays of the dtypes in `d` (each bf16, f16 or f32; none q8), rounded to nearest.
struct MixedPairs {
  void* at[3];
  StateDTypes d;

  /// Whether every kept array of `d` is one MixedPairs takes, rounded to nearest.
  static bool takes(const StateDTypes& d, unsigned kept) {
    if (d.stochastic) return false;
    for (int k = 0; k < 3; ++k)
      if ((kept >> k & 1u) != 0 && d.of[k] != DType::bf16 && d.of[k] != DType::f16 &&
          d.of[k] != DType::f32)
        return false;
    return true;
  }

  KOKKOS_FORCEINLINE_FUNCTION void load(int k, std::int64_t i, LaneF (&a)[2]) const {
    switch (d.of[k]) {
      case DType::bf16:
        return bf16_pair_floats(load_lanes(static_cast<const bfloat16*>(at[k]) + i), a);
      case DType::f16:
        return f16_pair_floats(load_lanes(static_cast<const float16*>(at[k]) + i), a);
      default:
        return f32_pair_floats(static_cast<const float*>(at[k]) + i, a);
    }
  }
  /// Finite: no value of `a` is NaN (bf16_finite_pairs; F16C's conversion tests for NaN itself).
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, const LaneF (&a)[2]) const {
    switch (d.of[k]) {
      case DType::bf16:
        return store_lanes(static_cast<bfloat16*>(at[k]) + i,
                           Finite ? bf16_finite_pairs(a[0], a[1]) : bf16_nearest_pairs(a[0], a[1]));
      case DType::f16:
        return store_lanes(static_cast<float16*>(at[k]) + i, f16_nearest_pairs(a[0], a[1]));
      default:
        return store_f32_pairs(static_cast<float*>(at[k]) + i, a[0], a[1]);
    }
  }
  /// The lines of array k that hold elements i .. i + 2 * lane_count - 1 (two for f32).
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    if (d.of[k] != DType::f32) return prefetch_ahead(static_cast<const std::uint16_t*>(at[k]), i);
    prefetch_ahead(static_cast<const float*>(at[k]), i);
    prefetch_ahead(static_cast<const float*>(at[k]), i + 16);
  }
};
#endif

}  // namespace kopt::Impl
