#pragma once
/// \file
/// The fused update's host path: a range over chunks, each chunk one call of the loop
/// compiled for its launch's dtypes, policy variant and state form (host_loops.hpp,
/// paired_loop.hpp). Those loops do not depend on the host space, so they are compiled once
/// for all of them (host_chunk_fn, instantiated in backends/host/) and a host launch reaches
/// its loop through one function pointer per launch. Serial and OpenMP each compiled their
/// own copies before: 2.8 MB of the same object code, and about half of each kernel file's
/// compile time (fused_serial.cpp 204 -> 106 s, fused_openmp.cpp 245 -> 136 s, Release; the
/// seven files of loops 60 s together).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/chunk_table.hpp>
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/host_loops.hpp>
#include <kopt/impl/narrow_state.hpp>
#include <kopt/impl/paired_loop.hpp>
#include <kopt/impl/update_dispatch.hpp>
#include <type_traits>

namespace kopt::Impl {

/// A slot's master array as form F keeps it: fp32 masters, remainders, or none (null).
template <class F>
KOKKOS_FORCEINLINE_FUNCTION typename F::MasterT* slot_master(const UpdateSlot& slot) {
  using MasterT = typename F::MasterT;
  if constexpr (std::is_same_v<MasterT, float>)
    return slot.master;
  else if constexpr (std::is_same_v<MasterT, std::uint16_t>)
    return slot.remainder;
  else
    return nullptr;  // none stored
}

/// A slot's array k as form F's element type (float or bfloat16; not NarrowState, whose
/// arrays are read per dtype: float here only for the type).
template <class F>
KOKKOS_FORCEINLINE_FUNCTION auto* slot_state(const UpdateSlot& slot, int k) {
  using StateT = typename F::StateT;
  using T = std::conditional_t<std::is_same_v<StateT, NarrowState>, float, StateT>;
  return static_cast<T*>(slot.state[k]);
}

/// The step scalars of a chunk: its row's, with its param's rate where the policy has one.
template <class Policy, class ScalarsView, class RatesView>
KOKKOS_FORCEINLINE_FUNCTION typename Policy::Scalars chunk_scalars(const ScalarsView& scalars,
                                                                   const RatesView& rates,
                                                                   const Chunk& chunk,
                                                                   const UpdateSlot& slot) {
  typename Policy::Scalars s = scalars(slot.scalar_set);
  if constexpr (param_rated<Policy>) s.rate = rates(chunk.slot);
  return s;
}

/// A chunk's rounding: stochastic rounding's key (of the params or state arrays), from its
/// param's stream and the step its row makes; nothing to key otherwise.
template <class StepsView>
KOKKOS_FORCEINLINE_FUNCTION ChunkRounding chunk_rounding(bool stochastic, const StepsView& steps,
                                                         const UpdateSlot& slot) {
  if (!stochastic) return ChunkRounding{};
  return ChunkRounding{rounding_key(slot.rounding_stream, steps(slot.scalar_set)),
                       slot.first_index};
}

/// One chunk of a host launch: the loop of its form. A row-factored policy's chunk runs in
/// pieces within one row each, every piece the fp32-state loop with the row's factor in the
/// scalars and the column factors as the first array (read, not written: the update does
/// not change it).
template <class Policy, int V, class ParamT, class GradT, class F>
void host_update_chunk(const Chunk& chunk, const UpdateSlot& slot,
                       const typename Policy::Scalars& s, const StateDTypes& d,
                       const ChunkRounding& r) {
  using MasterT = typename F::MasterT;
  auto* param = static_cast<ParamT*>(slot.param);
  const auto* grad = static_cast<const GradT*>(slot.grad);
  MasterT* master = slot_master<F>(slot);
  if constexpr (row_factored<Policy>) {
    constexpr bool stored =
        std::is_same_v<MasterT, float> || std::is_same_v<MasterT, std::uint16_t>;
    float* cols = static_cast<float*>(slot.state[0]);
    const auto* rows = static_cast<const float*>(slot.state[1]);
    for (std::int64_t i = chunk.begin; i < chunk.end;) {
      const std::int64_t row = i / slot.cols, j = i - row * slot.cols;
      const std::int64_t n = chunk.end - i < slot.cols - j ? chunk.end - i : slot.cols - j;
      typename Policy::Scalars sr = s;
      sr.row = rows[row];
      MasterT* m = nullptr;
      if constexpr (stored && !std::is_same_v<ParamT, float>) m = master + i;
      fused_host_loop<Policy, V, ParamT, GradT, Form<MasterT, float>>(
          0, n, param + i, grad + i, m, cols + j, nullptr, nullptr, sr,
          ChunkRounding{r.key, r.first + i});
      i += n;
    }
  } else if constexpr (std::is_same_v<typename F::StateT, NarrowState>) {
    narrow_host_loop<Policy, V, ParamT, GradT, F>(chunk.begin, chunk.end, param, grad, master,
                                                  slot.state[0], slot.state[1], slot.state[2], d, s,
                                                  r);
  } else if constexpr (paired_form<Policy, V, ParamT, GradT, F>) {
    paired_host_loop<Policy, V, ParamT, GradT, F>(chunk.begin, chunk.end, param, grad, master,
                                                  slot_state<F>(slot, 0), slot_state<F>(slot, 1),
                                                  slot_state<F>(slot, 2), s, r);
  } else {
    fused_host_loop<Policy, V, ParamT, GradT, F>(chunk.begin, chunk.end, param, grad, master,
                                                 slot_state<F>(slot, 0), slot_state<F>(slot, 1),
                                                 slot_state<F>(slot, 2), s, r);
  }
}

/// A compiled host_update_chunk.
template <class Policy>
using HostChunkFn = void (*)(const Chunk&, const UpdateSlot&, const typename Policy::Scalars&,
                             const StateDTypes&, const ChunkRounding&);

/// The chunk function of a launch over params of dtype `param` with grads of `grad`, the
/// policy's variant `variant` and state kept as `storage`. Declared extern for every policy
/// (kopt/fused_optimizer.hpp) and instantiated once, in backends/host/host_chunks_*.cpp.
template <class Policy>
HostChunkFn<Policy> host_chunk_fn(DType param, DType grad, int variant,
                                  const StateStorage& storage) {
  HostChunkFn<Policy> fn = nullptr;
  visit_update_dtype(param, [&](auto param_type) {
    visit_update_dtype(grad, [&](auto grad_type) {
      visit_variant<Policy>(variant, [&](auto v) {
        using P = decltype(param_type);
        visit_form<P>(storage, [&](auto form) {
          fn = &host_update_chunk<Policy, decltype(v)::value, P, decltype(grad_type),
                                  decltype(form)>;
        });
      });
    });
  });
  return fn;
}

/// The fused update of every chunk in `chunks` on a host space: one iteration per chunk,
/// through the launch's chunk function.
template <class ExecSpace, class Policy>
struct HostUpdateFunctor {
  using memory_space = typename ExecSpace::memory_space;
  HostChunkFn<Policy> run;
  Kokkos::View<const UpdateSlot*, memory_space> slots;
  Kokkos::View<const typename Policy::Scalars*, memory_space> scalars;
  Kokkos::View<const Chunk*, memory_space> chunks;
  Kokkos::View<const std::int64_t*, memory_space> steps;  ///< each row's step (stochastic)
  Kokkos::View<const float*, memory_space> rates;         ///< per slot, tensor-rate policies'
  StateDTypes dtypes;
  bool stochastic;  ///< StateStorage::keyed(): the chunks' rounding is keyed

  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
#if !defined(__CUDA_ARCH__)  // host spaces only: a device pass has nothing to compile here
    const Chunk chunk = chunks(c);
    const UpdateSlot& slot = slots(chunk.slot);
    run(chunk, slot, chunk_scalars<Policy>(scalars, rates, chunk, slot), dtypes,
        chunk_rounding(stochastic, steps, slot));
#else
    (void)c;
#endif
  }
};

}  // namespace kopt::Impl
