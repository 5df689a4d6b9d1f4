#pragma once
/// \file
/// The state arrays of narrow_host_loop (kopt/impl/host_loops.hpp) as fused_lanes reads and
/// writes them: each array in its own dtype (f32, bf16, f16; not q8, whose blocks are encoded
/// whole), widened into a lane vector of floats and rounded back to nearest even, or
/// stochastically (StateStorage::state_rounding). (Where params and grads are bf16 and no
/// fp32 master is kept, the paired loop's MixedPairs and Bf16Pairs take them instead:
/// kopt/impl/paired_arrays.hpp.)
///
/// The dtypes are run-time values, the same for a whole launch (kopt/impl/narrow_state.hpp):
/// a switch per array and vector that the branch predictor gets right every time, where
/// staging each array through fp32 scratch (widen a block, update it, round it back) wrote
/// and read every element twice more. On one core of a 2-core AMD EPYC (Zen 5), in cache,
/// with the remainder join and widening loads of the same commit: the 22-byte step
/// (remainder, bf16 m, f32 v) 1.82 -> 2.56 G elements/s, f16 m and v 1.73 -> 2.51 G.

#include <cstdint>
#include <cstring>
#include <kopt/dtype.hpp>
#include <kopt/impl/f16_blocks.hpp>  // KOPT_HAVE_F16C
#include <kopt/impl/fused_lanes.hpp>
#include <kopt/impl/narrow_state.hpp>

namespace kopt::Impl {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// lane_count float16 elements as floats: F16C's conversion where the CPU has it (the same
/// bits as float16::to_float for every stored value: f16_blocks.hpp), else element by element.
KOKKOS_FORCEINLINE_FUNCTION LaneF load_f16_floats(const float16* at) {
  LaneF x;
#if defined(KOPT_HAVE_F16C) && defined(__AVX512F__)
  static_assert(lane_count == 16);
  const __m512 w = _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  std::memcpy(&x, &w, sizeof x);
#elif defined(KOPT_HAVE_F16C)
  static_assert(lane_count == 8);
  const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
  std::memcpy(&x, &w, sizeof x);
#else
  for (int l = 0; l < lane_count; ++l) x[l] = at[l].to_float();
#endif
  return x;
}

/// float16::from_float of each lane, stored.
KOKKOS_FORCEINLINE_FUNCTION void store_f16_nearest(float16* at, LaneF x) {
#ifdef KOPT_HAVE_F16C
  constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(KOPT_HAVE_F16C) && defined(__AVX512F__)
  __m512 w;
  std::memcpy(&w, &x, sizeof w);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at),
                      _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, w, nearest));
#elif defined(KOPT_HAVE_F16C)
  __m256 w;
  std::memcpy(&w, &x, sizeof w);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm256_cvtps_ph(w, nearest));
#else
  for (int l = 0; l < lane_count; ++l) at[l] = float16::from_float(x[l]);
#endif
}

/// fused_lanes' state arrays in the dtypes of `d` (none of them q8); stochastic stores
/// (d.stochastic) draw each array's bits from `r`.
struct NarrowArrays {
  void* at[3];
  StateDTypes d;
  ChunkRounding r;

  KOKKOS_FORCEINLINE_FUNCTION LaneF load(int k, std::int64_t i) const {
    switch (d.of[k]) {
      case DType::bf16:
        return load_floats(static_cast<const bfloat16*>(at[k]) + i);
      case DType::f16:
        return load_f16_floats(static_cast<const float16*>(at[k]) + i);
      default:
        return load_floats(static_cast<const float*>(at[k]) + i);
    }
  }
  /// Finite: x holds no NaN (store_bf16_nearest's; stochastic and f16 stores test for it).
  template <bool Finite = false>
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, std::int64_t i, LaneF x) const {
    if (d.stochastic && d.of[k] != DType::f32) {
      const LaneU bits = rounding_lanes(r.of_array(k), i, 1, 0);
      return store_halves(static_cast<char*>(at[k]) + 2 * i,
                          d.of[k] == DType::bf16 ? stochastic_bf16_bits(float_bits(x), bits)
                                                 : stochastic_f16_bits(float_bits(x), bits));
    }
    switch (d.of[k]) {
      case DType::bf16:
        return store_bf16_nearest<Finite>(static_cast<bfloat16*>(at[k]) + i, x);
      case DType::f16:
        return store_f16_nearest(static_cast<float16*>(at[k]) + i, x);
      default:
        return store_lanes(static_cast<float*>(at[k]) + i, float_bits(x));
    }
  }
  KOKKOS_FORCEINLINE_FUNCTION void prefetch(int k, std::int64_t i) const {
    prefetch_ahead(static_cast<const char*>(at[k]), i * (d.of[k] == DType::f32 ? 4 : 2));
  }
};
#endif

}  // namespace kopt::Impl
