#pragma once
/// \file
/// One element's fused update: the forms a param's stored state takes (its master, its state
/// arrays' dtypes) as types, the param side of an update for each, and fused_element, which
/// device teams run and the host loops (kopt/impl/host_loops.hpp, paired_loop.hpp) vectorize.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/narrow_state.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <kopt/impl/policy.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>
#include <type_traits>

namespace kopt::Impl {
/// Masters of MasterStorage::none: nothing stored, the update rounded into the param.
struct RoundToNearest {};
struct RoundStochastic {};

/// State arrays neither all f32 nor all bf16: each array's element type (f32, bf16, f16) is
/// read at run time from StateDTypes, the same for a whole launch. One compiled loop thus
/// serves every combination of per-array dtypes; the host loop widens a block of each 16-bit
/// array into fp32 scratch, runs the fp32 loop over it and rounds it back (narrow_state.hpp).
/// All-bf16 arrays, the common narrow form, keep a loop that converts in registers: staged,
/// it ran 0.91, 0.95 and 0.82 as fast with remainders, none and stochastic rounding (one
/// core of the 2-core Xeon, in cache).
struct NarrowState {};

/// How the kernels find a param's state stored (kopt::StateStorage), as types: its master
/// (Master: float, an fp32 copy; std::uint16_t, a remainder that with the bf16 param holds
/// it exactly; RoundToNearest or RoundStochastic, none) and its state arrays' elements
/// (State: float, all f32; bfloat16, all bf16; NarrowState, any other mix).
template <class Master, class State>
struct Form {
  using MasterT = Master;
  using StateT = State;
};
using Fp32Form = Form<float, float>;

template <class ParamT, class F>
inline constexpr bool valid_form =
    (std::is_same_v<typename F::MasterT, float> ||
     std::is_same_v<typename F::MasterT, RoundToNearest> ||
     ((std::is_same_v<typename F::MasterT, std::uint16_t> ||
       std::is_same_v<typename F::MasterT, RoundStochastic>)&&std::is_same_v<ParamT, bfloat16>)) &&
    (std::is_same_v<typename F::StateT, float> || std::is_same_v<typename F::StateT, bfloat16>);

/// Whether a policy's update takes a per-row and a per-column factor (Adafactor's): its
/// slots' state[0] holds a factor per column and state[1] one per row (the param read as rows
/// of UpdateSlot::cols elements); the update kernel binds the column's as the first array
/// element (read, not written) and sets the row's as Scalars::row.
template <class Policy>
inline constexpr bool row_factored = requires {
  Policy::row_factored;
};

/// Whether a policy's update takes a rate per param (LAMB's trust ratio from its tensor sums,
/// Muon's and Adafactor's from their tensor stage: kopt/impl/tensor_rates.hpp,
/// tensor_stage.hpp), set in a chunk's scalars from its slot's entry of the rates.
template <class Policy>
inline constexpr bool param_rated = (requires { Policy::tensor_sums; }) ||
                                    (requires { Policy::tensor_stage; });

/// Whether a policy's update reads values of its chunk's own param (a rate, row factors): its
/// chunks are never joined into runs across params (kopt/impl/chunk_runs.hpp).
template <class Policy>
inline constexpr bool reads_param_values = param_rated<Policy> || row_factored<Policy>;

/// The arrays variant V's update binds: those it keeps, and a row-factored policy's column
/// factors.
template <class Policy, int V>
inline constexpr unsigned bound_arrays = Policy::arrays_of(V) | (row_factored<Policy> ? 1u : 0u);

/// The param side of one element's update (a0..a2: its state, as floats): an f32 param in
/// place, a 16-bit one through its master (an fp32 copy, or joined from a remainder), or
/// without one, from the param widened and rounded back (to nearest, or stochastically).
template <class Policy, int V, class ParamT, class GradT, class F>
KOKKOS_FORCEINLINE_FUNCTION void update_param(std::int64_t i, ParamT* KOPT_RESTRICT param,
                                              const GradT* KOPT_RESTRICT grad,
                                              typename F::MasterT* KOPT_RESTRICT master, float& a0,
                                              float& a1, float& a2,
                                              const typename Policy::Scalars& s,
                                              const ChunkRounding& r) {
  using MasterT = typename F::MasterT;
  if constexpr (std::is_same_v<ParamT, float>) {
    param[i] = Policy::template update<V>(param[i], to_float(grad[i]), a0, a1, a2, s);
  } else if constexpr (std::is_same_v<MasterT, RoundToNearest> ||
                       std::is_same_v<MasterT, RoundStochastic>) {
    const float p =
        Policy::template update<V>(to_float(param[i]), to_float(grad[i]), a0, a1, a2, s);
    if constexpr (std::is_same_v<MasterT, RoundToNearest>)
      param[i] = from_float<ParamT>(p);
    else
      param[i] = round_stochastic(p, r.bits(i));
  } else if constexpr (std::is_same_v<MasterT, std::uint16_t>) {
    const float w = join_master(param[i], master[i]);
    const float p = Policy::template update<V>(w, to_float(grad[i]), a0, a1, a2, s);
    param[i] = split_param(p);
    master[i] = split_remainder(p);
  } else {
    const float p = Policy::template update<V>(master[i], to_float(grad[i]), a0, a1, a2, s);
    master[i] = p;
    param[i] = from_float<ParamT>(p);
  }
}

/// State element i as the update takes it: the fp32 element itself, or a bf16 one widened
/// into `local` (written back by store_state).
template <class StateT>
KOKKOS_FORCEINLINE_FUNCTION float& state_ref(StateT* s, std::int64_t i, float& local) {
  if constexpr (std::is_same_v<StateT, float>) {
    return s[i];
  } else {
    local = to_float(s[i]);
    return local;
  }
}
template <class StateT>
KOKKOS_FORCEINLINE_FUNCTION void store_state(StateT* s, std::int64_t i, float value) {
  if constexpr (!std::is_same_v<StateT, float>) s[i] = from_float<StateT>(value);
}

/// One element of the fused update: widen, update (on the master for 16-bit params), round
/// back once. s0..s2 are the policy's state arrays (only those variant V keeps are touched),
/// widened and rounded back (to nearest even) when they are bf16.
template <class Policy, int V, class ParamT, class GradT, class F>
KOKKOS_FORCEINLINE_FUNCTION void fused_element(
    std::int64_t i, ParamT* KOPT_RESTRICT param, const GradT* KOPT_RESTRICT grad,
    typename F::MasterT* KOPT_RESTRICT master, typename F::StateT* KOPT_RESTRICT s0,
    typename F::StateT* KOPT_RESTRICT s1, typename F::StateT* KOPT_RESTRICT s2,
    const typename Policy::Scalars& s, const ChunkRounding& r) {
  static_assert(valid_form<ParamT, F>);
  constexpr unsigned kept = bound_arrays<Policy, V>;
  float unused0 = 0.0f, unused1 = 0.0f, unused2 = 0.0f, w0 = 0.0f, w1 = 0.0f, w2 = 0.0f;
  float& a0 = (kept & 1u) ? state_ref(s0, i, w0) : unused0;
  float& a1 = (kept & 2u) ? state_ref(s1, i, w1) : unused1;
  float& a2 = (kept & 4u) ? state_ref(s2, i, w2) : unused2;
  update_param<Policy, V, ParamT, GradT, F>(i, param, grad, master, a0, a1, a2, s, r);
  if constexpr ((kept & 1u) != 0) store_state(s0, i, a0);
  if constexpr ((kept & 2u) != 0) store_state(s1, i, a1);
  if constexpr ((kept & 4u) != 0) store_state(s2, i, a2);
}

/// How far ahead (in elements) the host loops ask the cache for every array they stream, and
/// how many elements they update between two such requests (one 64-byte line of fp32).
/// Measured on a 2-core EPYC, 1 thread, 2^24 elements: fp32 0.79-0.88 of the plain OpenMP
/// loop without, 0.96-0.99 with; bf16 with masters 0.83 without, 0.94-1.02 with.
inline constexpr std::int64_t update_prefetch_elements = 512;
inline constexpr int update_prefetch_stride = 16;

/// Prefetches element i + update_prefetch_elements of each array the update streams (of the
/// state arrays only with State: not when s0..s2 are narrow_host_loop's scratch).
template <class Policy, int V, bool State, class ParamT, class GradT, class MasterT, class StateT>
KOKKOS_FORCEINLINE_FUNCTION void prefetch_update(std::int64_t i, const ParamT* param,
                                                 const GradT* grad, const MasterT* master,
                                                 const StateT* s0, const StateT* s1,
                                                 const StateT* s2) {
  constexpr unsigned kept = State ? bound_arrays<Policy, V> : 0u;
  const std::int64_t a = i + update_prefetch_elements;
  prefetch_ahead(param, a);
  prefetch_ahead(grad, a);
  if constexpr (!std::is_same_v<ParamT, float> &&
                (std::is_same_v<MasterT, float> || std::is_same_v<MasterT, std::uint16_t>))
    prefetch_ahead(master, a);
  if constexpr ((kept & 1u) != 0) prefetch_ahead(s0, a);
  if constexpr ((kept & 2u) != 0) prefetch_ahead(s1, a);
  if constexpr ((kept & 4u) != 0) prefetch_ahead(s2, a);
}

/// One element with 16-bit state arrays (device teams): each kept array's element widened,
/// updated, and rounded back (to nearest, or stochastically: StateDTypes::stochastic).
template <class Policy, int V, class ParamT, class GradT, class F>
KOKKOS_FORCEINLINE_FUNCTION void narrow_element(std::int64_t i, ParamT* KOPT_RESTRICT param,
                                                const GradT* KOPT_RESTRICT grad,
                                                typename F::MasterT* KOPT_RESTRICT master, void* s0,
                                                void* s1, void* s2, const StateDTypes& d,
                                                const typename Policy::Scalars& s,
                                                const ChunkRounding& r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  float a0 = (kept & 1u) ? d.template load<false>(0, s0, i) : 0.0f;
  float a1 = (kept & 2u) ? d.template load<false>(1, s1, i) : 0.0f;
  float a2 = (kept & 4u) ? d.template load<false>(2, s2, i) : 0.0f;
  update_param<Policy, V, ParamT, GradT, Form<typename F::MasterT, float>>(i, param, grad, master,
                                                                           a0, a1, a2, s, r);
  if constexpr ((kept & 1u) != 0) d.store(0, s0, i, a0, r);
  if constexpr ((kept & 2u) != 0) d.store(1, s1, i, a1, r);
  if constexpr ((kept & 4u) != 0) d.store(2, s2, i, a2, r);
}

}  // namespace kopt::Impl
