#pragma once
/// \file
/// State arrays stored in 16 or 8 bits (kopt::StateStorage's per-array dtypes: f32, bf16,
/// f16, q8), as the update kernel reads and writes them. The dtype of each array is a run-time
/// value, the same for a whole launch: compiling one loop per combination of three arrays' dtypes
/// would multiply the kernels by up to 27, while a branch on a launch-wide value costs
/// nothing measurable (the host widens a block of 256 elements per branch; a device warp
/// takes the same branch on every thread).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/dtype.hpp>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/f16_blocks.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// The element type of each of a launch's state arrays (StateStorage::dtype_of).
struct StateDTypes {
  DType of[max_state_arrays] = {DType::f32, DType::f32, DType::f32};
  /// Bit k: q8 array k is non-negative and holds its square roots (block_q8.hpp; the
  /// policy's q8_square_arrays).
  unsigned roots = 0;
  /// StateStorage::state_rounding is stochastic: bf16 and f16 stores draw random bits.
  bool stochastic = false;

  static StateDTypes from(const StateStorage& storage, unsigned roots = 0) {
    StateDTypes d;
    for (std::size_t k = 0; k < max_state_arrays; ++k) d.of[k] = storage.dtype_of(k);
    d.roots = roots;
    d.stochastic = storage.state_rounding == Rounding::stochastic;
    return d;
  }
  KOKKOS_FORCEINLINE_FUNCTION bool root(int k) const { return (roots >> k & 1u) != 0; }

  /// Element i of array k (at `s`), widened; `WithQ8`: the array may be q8. The device's
  /// element loop, which never sees q8, loads without it (with the q8 path in the same
  /// kernel, launches without q8 arrays ran at half speed on an H200).
  template <bool WithQ8 = true>
  KOKKOS_FORCEINLINE_FUNCTION float load(int k, const void* s, std::int64_t i) const {
    if constexpr (WithQ8)
      if (of[k] == DType::q8) {
        const unsigned char* block = q8_block_of(const_cast<void*>(s), i);
        const std::uint32_t code = block[i % q8_block];
        return root(k) ? q8_decode<true>(code, q8_scale_of(block))
                       : q8_decode<false>(code, q8_scale_of(block));
      }
    switch (of[k]) {
      case DType::bf16:
        return to_float(static_cast<const bfloat16*>(s)[i]);
      case DType::f16:
        return to_float(static_cast<const float16*>(s)[i]);
      default:
        return static_cast<const float*>(s)[i];
    }
  }
  /// Element i of array k (at `s`) = v, rounded to nearest even, or stochastically with
  /// the bits `r` gives the array's element i. Not for q8 arrays, whose blocks are encoded
  /// whole (q8_encode_run, with the same bits).
  KOKKOS_FORCEINLINE_FUNCTION void store(int k, void* s, std::int64_t i, float v,
                                         const ChunkRounding& r) const {
    switch (of[k]) {
      case DType::bf16:
        static_cast<bfloat16*>(s)[i] =
            stochastic ? round_stochastic(v, r.array_bits(k, i)) : bfloat16::from_float(v);
        return;
      case DType::f16:
        static_cast<float16*>(s)[i] =
            stochastic ? round_stochastic_f16(v, r.array_bits(k, i)) : float16::from_float(v);
        return;
      default:
        static_cast<float*>(s)[i] = v;
    }
  }
};

/// Elements per block of the host loop over 16-bit state: three arrays' fp32 scratch (3 KiB)
/// stays in L1. A multiple of f16_block, and of 64 bytes of every dtype.
inline constexpr int narrow_stage = 256;

/// out[j] = in[j] widened, j < n (n <= narrow_stage): its own function with restrict
/// pointers, so the loop vectorizes.
template <class T>
KOPT_LOOP_FUNCTION void widen_run(const T* KOPT_RESTRICT in, float* KOPT_RESTRICT out, int n) {
  int j = 0;
  if constexpr (std::is_same_v<T, float16>)  // the CPU's conversions, where it has them
    for (; j + f16_block <= n; j += f16_block) widen_block(in + j, out + j);
  for (; j < n; ++j) out[j] = to_float(in[j]);
}

/// out[j] = in[j] rounded to nearest even, j < n.
template <class T>
KOPT_LOOP_FUNCTION void round_run(const float* KOPT_RESTRICT in, T* KOPT_RESTRICT out, int n) {
  int j = 0;
  if constexpr (std::is_same_v<T, float16>)
    for (; j + f16_block <= n; j += f16_block) round_block(in + j, out + j);
  for (; j < n; ++j) out[j] = from_float<T>(in[j]);
}

/// Elements [i, i + n) of array `s` of `dtype` as fp32: the array itself when it is f32,
/// else `scratch` with them widened (q8: decoded; i starts a block, n <= q8_block; `root`:
/// the array holds square roots). Also asks the cache for the block `ahead` elements on.
KOKKOS_INLINE_FUNCTION float* stage_in(DType dtype, void* s, std::int64_t i, int n, float* scratch,
                                       std::int64_t ahead, bool root = false) {
  if (dtype == DType::q8) {
    const unsigned char* next = q8_block_of(s, i + ahead);
    for (std::int64_t b = 0; b < q8_block_bytes; b += 64) prefetch_ahead(next, b);
    q8_decode_run(root, q8_block_of(s, i), scratch, n);
    return scratch;
  }
  const std::int64_t width = dtype == DType::f32 ? 4 : 2;
  for (std::int64_t b = (i + ahead) * width; b < (i + ahead + n) * width; b += 64)
    prefetch_ahead(static_cast<const char*>(s), b);
  switch (dtype) {
    case DType::bf16:
      widen_run(static_cast<const bfloat16*>(s) + i, scratch, n);
      return scratch;
    case DType::f16:
      widen_run(static_cast<const float16*>(s) + i, scratch, n);
      return scratch;
    default:
      return static_cast<float*>(s) + i;
  }
}

/// out[j] = in[j] rounded stochastically with the bits `r` gives element i + j, j < n.
template <class T>
KOPT_LOOP_FUNCTION void round_run_stochastic(const float* KOPT_RESTRICT in, T* KOPT_RESTRICT out,
                                             int n, const ChunkRounding r, std::int64_t i) {
  for (int j = 0; j < n; ++j) {
    const std::uint32_t bits = r.bits(i + j), x = float_bits(in[j]);
    if constexpr (std::is_same_v<T, bfloat16>)
      out[j] = bfloat16{static_cast<std::uint16_t>(stochastic_bf16_bits(x, bits))};
    else
      out[j] = float16{static_cast<std::uint16_t>(stochastic_f16_bits(x, bits))};
  }
}

/// Writes `scratch` (stage_in's) back into elements [i, i + n) of array k of `d` (16-bit:
/// rounded as d says, with `r`'s bits), or encodes it as the q8 block starting at i (to
/// nearest, or stochastically with the same bits).
KOKKOS_INLINE_FUNCTION void stage_out(const StateDTypes& d, int k, void* s, std::int64_t i, int n,
                                      const float* scratch, const ChunkRounding& r) {
  const DType dtype = d.of[k];
  const ChunkRounding rk = r.of_array(k);
  if (dtype == DType::q8)
    q8_encode_run(d.root(k), scratch, q8_block_of(s, i), n, d.stochastic ? &rk : nullptr, i);
  if (dtype == DType::bf16 && d.stochastic)
    round_run_stochastic(scratch, static_cast<bfloat16*>(s) + i, n, rk, i);
  else if (dtype == DType::bf16)
    round_run(scratch, static_cast<bfloat16*>(s) + i, n);
  if (dtype == DType::f16 && d.stochastic)
    round_run_stochastic(scratch, static_cast<float16*>(s) + i, n, rk, i);
  else if (dtype == DType::f16)
    round_run(scratch, static_cast<float16*>(s) + i, n);
}

}  // namespace kopt::Impl
