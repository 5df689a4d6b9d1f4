#pragma once
/// \file
/// The pieces of a tensor-sums measure pass (kopt/impl/tensor_sums.hpp) that fix its bits
/// and its speed on the host:
/// - a block's sum of squares as one tree (block_square_sum), the same on every path: the
///   host sums its blocks with vector instructions, a device thread sums one block alone,
///   and both get the same double;
/// - the host's measure of a strip of elements (measure_strip): every stream widened into
///   fp32 a loop at a time, then the policy's measure over them in one loop the compiler
///   vectorizes (LAMB's square root and divide 16 wide). Element by element, through each
///   state array's dtype switch, the measure ran at a third of the update's rate.

#include <cstdint>
#include <cstring>
#include <kopt/compat.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <type_traits>

namespace kopt::Impl {

/// Elements per block of the sums: ShardLayout::alignment, so that a param cut by ZeRO has
/// the same blocks, whole, on its ranks.
inline constexpr int tensor_sum_block = 16;

/// The sum of x[e]^2 over one block (x padded with zeros past its elements), in double in
/// one order: e with e + 8, then the halves of that, twice more (the order in which vector
/// registers reduce). Each square of a float is exact in double, so a fused multiply-add
/// gives the same bits as a multiply and an add, whatever each compiler contracts.
KOKKOS_FORCEINLINE_FUNCTION double block_square_sum_scalar(const float* x) {
  double t[8];
  for (int e = 0; e < 8; ++e) {
    const double a = x[e], b = x[e + 8];
    t[e] = a * a + b * b;
  }
  for (int e = 0; e < 4; ++e) t[e] += t[e + 4];
  for (int e = 0; e < 2; ++e) t[e] += t[e + 2];
  return t[0] + t[1];
}

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
/// block_square_sum_scalar's adds as vector instructions (GCC and Clang's vector
/// extensions): in scalar ones the tree was a third of LAMB's measure pass.
inline double block_square_sum_vector(const float* x) {
  using F8 = float __attribute__((vector_size(32)));
  using D8 = double __attribute__((vector_size(64)));
  using D4 = double __attribute__((vector_size(32)));
  using D2 = double __attribute__((vector_size(16)));
  F8 lo_f, hi_f;
  std::memcpy(&lo_f, x, sizeof lo_f);
  std::memcpy(&hi_f, x + 8, sizeof hi_f);
  const D8 lo = __builtin_convertvector(lo_f, D8), hi = __builtin_convertvector(hi_f, D8);
  const D8 t = lo * lo + hi * hi;
  const D4 u =
      __builtin_shufflevector(t, t, 0, 1, 2, 3) + __builtin_shufflevector(t, t, 4, 5, 6, 7);
  const D2 v = __builtin_shufflevector(u, u, 0, 1) + __builtin_shufflevector(u, u, 2, 3);
  return v[0] + v[1];
}
#endif

/// The block's sum as this compiler computes it fastest: the same bits either way
/// (tests/test_tensor_sums.cpp compares the two).
KOKKOS_FORCEINLINE_FUNCTION double block_square_sum(const float* x) {
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
  return block_square_sum_vector(x);
#else
  return block_square_sum_scalar(x);
#endif
}

/// Elements per host strip: 8 blocks, one 512-byte line pair of each fp32 stream.
inline constexpr int measure_strip_size = 8 * tensor_sum_block;

/// Elements [at, at + n) of `stream` as fp32: the stream itself when it is fp32, else
/// `scratch` with them widened. Asks the cache for the elements `update_prefetch_elements` on.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION void prefetch_run(const T* stream, std::int64_t at, int n) {
  const std::int64_t ahead = at + update_prefetch_elements;
  for (int e = 0; e < n; e += 64 / static_cast<int>(sizeof(T))) prefetch_ahead(stream, ahead + e);
}
template <class T>
KOKKOS_FORCEINLINE_FUNCTION const float* stream_in(const T* stream, std::int64_t at, int n,
                                                   float* scratch) {
  prefetch_run(stream, at, n);
  if constexpr (std::is_same_v<T, float>) {
    return stream + at;
  } else {
    widen_run(stream + at, scratch, n);
    return scratch;
  }
}

/// out[e] = the master that bf16 param[e] and remainder[e] hold, e < n.
KOPT_LOOP_FUNCTION void join_run(const bfloat16* KOPT_RESTRICT param,
                                 const std::uint16_t* KOPT_RESTRICT remainder,
                                 float* KOPT_RESTRICT out, int n) {
  for (int e = 0; e < n; ++e) out[e] = join_master(param[e], remainder[e]);
}

/// x[k * measure_strip_size + e] = the policy's k-th measured value of element e < n, from
/// inputs widened to fp32 (a, the state arrays; those the variant does not keep hold no
/// meaning: the policy ignores them).
template <class Policy>
KOPT_LOOP_FUNCTION void measure_run(const float* KOPT_RESTRICT w, const float* KOPT_RESTRICT g,
                                    const float* KOPT_RESTRICT a0, const float* KOPT_RESTRICT a1,
                                    const float* KOPT_RESTRICT a2, int n,
                                    const typename Policy::Scalars s, float* KOPT_RESTRICT x) {
  for (int e = 0; e < n; ++e) {
    float v[Policy::tensor_sums];
    Policy::measure(w[e], g[e], a0[e], a1[e], a2[e], s, v);
    for (int k = 0; k < Policy::tensor_sums; ++k) x[k * measure_strip_size + e] = v[k];
  }
}

/// Host: x as measure_run fills it for elements [at, at + n) of `slot` (n <=
/// measure_strip_size), the rest of each row zeros (a block past the slot's end).
template <class Policy, int V, class ParamT, class GradT, class MasterT>
KOKKOS_INLINE_FUNCTION void measure_strip(const UpdateSlot& slot, const StateDTypes& d,
                                          std::int64_t at, int n, const typename Policy::Scalars& s,
                                          float* x) {
  constexpr int S = measure_strip_size;
  constexpr unsigned kept = Policy::arrays_of(V);
  alignas(64) float w_scratch[S], g_scratch[S], a_scratch[3][S];
  const auto* param = static_cast<const ParamT*>(slot.param);
  const float* w;
  if constexpr (std::is_same_v<ParamT, float>) {
    w = stream_in(param, at, n, w_scratch);
  } else if constexpr (std::is_same_v<MasterT, float>) {
    w = stream_in(slot.master, at, n, w_scratch);
  } else if constexpr (std::is_same_v<MasterT, std::uint16_t>) {
    prefetch_run(param, at, n);
    prefetch_run(slot.remainder, at, n);
    join_run(param + at, slot.remainder + at, w_scratch, n);
    w = w_scratch;
  } else {
    w = stream_in(param, at, n, w_scratch);
  }
  const float* g = stream_in(static_cast<const GradT*>(slot.grad), at, n, g_scratch);
  const float* a[3];
  for (int k = 0; k < 3; ++k)
    a[k] = (kept >> k & 1u) != 0
               ? stage_in(d.of[k], slot.state[k], at, n, a_scratch[k], update_prefetch_elements)
               : w;
  measure_run<Policy>(w, g, a[0], a[1], a[2], n, s, x);
  for (int k = 0; k < Policy::tensor_sums; ++k)
    for (int e = n; e < S; ++e) x[k * S + e] = 0.0f;
}

}  // namespace kopt::Impl
