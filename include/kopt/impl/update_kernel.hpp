#pragma once
/// \file
/// The fused update kernel over a chunk table: many tensors, one launch, any algorithm (the
/// element update is its policy's, kopt/impl/policy.hpp).
///
/// A group's tensors are cut into chunks of at most chunk_size elements; one work item (a
/// host iteration, or a device team) updates one chunk, so a step over 10,000 small
/// tensors is one launch of about the same cost as one tensor of the same total size.
/// Per-tensor pointers sit in a slot table, read once per chunk; each slot names its step
/// scalars in a table with one row per (group, step count) in use, so a steady-state step
/// rewrites that small table and not one slot per tensor.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/f16_blocks.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/narrow_state.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <kopt/impl/policy.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kopt::Impl {

/// One parameter's memory and this step's scalars, as the kernel sees them.
struct UpdateSlot {
  void* param = nullptr;                ///< ParamT*
  const void* grad = nullptr;           ///< GradT*
  float* master = nullptr;              ///< fp32 master of a 16-bit param, else null
  std::uint16_t* remainder = nullptr;   ///< or its remainder (MasterStorage::remainder)
  void* state[max_state_arrays] = {};   ///< the policy's arrays (float, bfloat16 or
                                        ///< float16: StateDTypes); null where not kept
  std::int32_t scalar_set = 0;          ///< row of the launch's step-scalar table
  std::uint64_t rounding_stream = 0;    ///< Rounding::stochastic: rounding_stream(seed, name)
  std::int64_t first_index = 0;         ///< element 0's index in the whole tensor
  DType grad_dtype = DType::f32;        ///< for the norm, which reads grads of every dtype at once
};

/// Elements [begin, end) of slot `slot`.
struct Chunk {
  std::int64_t begin;
  std::int64_t end;
  std::int32_t slot;
};

/// Elements per chunk: long enough to amortize the slot read and vectorize on the host,
/// short enough to balance threads and keep a device team's work small.
template <class ExecSpace>
inline constexpr std::int64_t chunk_size = runs_on_host<ExecSpace> ? 8192 : 4096;
/// Threads per team on devices.
inline constexpr int device_team_size = 256;

/// Appends the chunks covering `numel` elements of slot `slot`.
inline void append_chunks(std::vector<Chunk>& chunks, std::size_t slot, std::int64_t numel,
                          std::int64_t chunk) {
  for (std::int64_t b = 0; b < numel; b += chunk)
    chunks.push_back(Chunk{b, std::min(numel, b + chunk), static_cast<std::int32_t>(slot)});
}

/// A device copy of a host chunk list, labelled.
template <class ExecSpace>
Kokkos::View<Chunk*, typename ExecSpace::memory_space> upload_chunks(
    const ExecSpace& exec, const std::string& label, const std::vector<Chunk>& chunks) {
  allocation_point();
  Kokkos::View<Chunk*, typename ExecSpace::memory_space> dev(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, label), chunks.size());
  Kokkos::View<const Chunk*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
      chunks.data(), chunks.size());
  Kokkos::deep_copy(exec, dev, host);
  // `chunks` is caller-owned and may die right after: make sure the copy has read it.
  fence(exec, "kopt::upload_chunks");
  return dev;
}

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
       std::is_same_v<typename F::MasterT, RoundStochastic>) &&
      std::is_same_v<ParamT, bfloat16>)) &&
    (std::is_same_v<typename F::StateT, float> || std::is_same_v<typename F::StateT, bfloat16>);

/// Where a chunk's elements get their random bits (Rounding::stochastic; unused otherwise):
/// the key of its param and step, and the index of the slot's element 0 in the whole tensor.
struct ChunkRounding {
  RoundingKey key{0, 0};
  std::int64_t first = 0;
  KOKKOS_FORCEINLINE_FUNCTION std::uint32_t bits(std::int64_t i) const {
    return rounding_bits(key, first + i);
  }
};

/// The param side of one element's update (a0..a2: its state, as floats): an f32 param in
/// place, a 16-bit one through its master (an fp32 copy, or joined from a remainder), or
/// without one, from the param widened and rounded back (to nearest, or stochastically).
template <class Policy, int V, class ParamT, class GradT, class F>
KOKKOS_FORCEINLINE_FUNCTION void update_param(std::int64_t i, ParamT* KOPT_RESTRICT param,
                                              const GradT* KOPT_RESTRICT grad,
                                              typename F::MasterT* KOPT_RESTRICT master,
                                              float& a0, float& a1, float& a2,
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
KOKKOS_FORCEINLINE_FUNCTION void fused_element(std::int64_t i, ParamT* KOPT_RESTRICT param,
                                               const GradT* KOPT_RESTRICT grad,
                                               typename F::MasterT* KOPT_RESTRICT master,
                                               typename F::StateT* KOPT_RESTRICT s0,
                                               typename F::StateT* KOPT_RESTRICT s1,
                                               typename F::StateT* KOPT_RESTRICT s2,
                                               const typename Policy::Scalars& s,
                                               const ChunkRounding& r) {
  static_assert(valid_form<ParamT, F>);
  constexpr unsigned kept = Policy::arrays_of(V);
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
  constexpr unsigned kept = State ? Policy::arrays_of(V) : 0u;
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

/// The host loop over one chunk: unit stride, restrict parameters, and a function of its own,
/// so GCC vectorizes it whatever it would otherwise be inlined into (inlined into the Serial
/// backend's loop, GCC 12 gave up on it). Blocks of 16 elements, each after a prefetch of
/// the lines 512 elements ahead; the block's loop vectorizes like the whole one did.
/// PrefetchState: whether s0..s2 are streamed arrays (else scratch in L1).
template <class Policy, int V, class ParamT, class GradT, class F, bool PrefetchState = true>
KOPT_LOOP_FUNCTION void fused_host_loop(std::int64_t begin, std::int64_t end,
                                        ParamT* KOPT_RESTRICT param,
                                        const GradT* KOPT_RESTRICT grad,
                                        typename F::MasterT* KOPT_RESTRICT master,
                                        typename F::StateT* KOPT_RESTRICT s0,
                                        typename F::StateT* KOPT_RESTRICT s1,
                                        typename F::StateT* KOPT_RESTRICT s2,
                                        const typename Policy::Scalars s,
                                        const ChunkRounding r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  std::int64_t i = begin;
#ifdef KOPT_HAVE_F16C
  // float16 params or grads: blocks of 16 with the CPU's conversions (f16_blocks.hpp); the
  // update itself is the same expression on the same floats, so only the conversions differ.
  // (fp32 state and masters only: remainders are of bf16 params, whose f16 grads take the
  // loop below, as do bf16 state arrays.)
  if constexpr ((std::is_same_v<ParamT, float16> || std::is_same_v<GradT, float16>) &&
                std::is_same_v<F, Fp32Form>) {
    static_assert(f16_block == update_prefetch_stride);
    for (; i + f16_block <= end; i += f16_block) {
      prefetch_update<Policy, V, PrefetchState>(i, param, grad, master, s0, s1, s2);
      float g[f16_block], p[f16_block];
      widen_block(grad + i, g);
      for (int k = 0; k < f16_block; ++k) {
        float unused0 = 0.0f, unused1 = 0.0f, unused2 = 0.0f;
        float& a0 = (kept & 1u) ? s0[i + k] : unused0;
        float& a1 = (kept & 2u) ? s1[i + k] : unused1;
        float& a2 = (kept & 4u) ? s2[i + k] : unused2;
        const float w = std::is_same_v<ParamT, float> ? to_float(param[i + k]) : master[i + k];
        p[k] = Policy::template update<V>(w, g[k], a0, a1, a2, s);
      }
      if constexpr (std::is_same_v<ParamT, float>) {
        for (int k = 0; k < f16_block; ++k) param[i + k] = p[k];
      } else {
        for (int k = 0; k < f16_block; ++k) master[i + k] = p[k];
        round_block(p, param + i);
      }
    }
  }
#endif
  for (; i + update_prefetch_stride <= end; i += update_prefetch_stride) {
    // Not for an fp32 update that keeps no state (plain SGD: two streams, which the hardware
    // prefetcher follows alone): there the requests cost 0.69 -> 0.88 of the ceiling (2^26,
    // 1 thread, the 2-core EPYC). A 16-bit param's master is state enough: plain SGD bf16
    // went 0.82 -> 1.15 of its ceiling with them (2^26, 1 and 2 threads, 2-core Xeon).
    if constexpr (kept != 0 || !std::is_same_v<ParamT, float>)
      prefetch_update<Policy, V, PrefetchState>(i, param, grad, master, s0, s1, s2);
    for (int k = 0; k < update_prefetch_stride; ++k)
      fused_element<Policy, V, ParamT, GradT, F>(i + k, param, grad, master, s0, s1, s2, s, r);
  }
  for (; i < end; ++i)
    fused_element<Policy, V, ParamT, GradT, F>(i, param, grad, master, s0, s1, s2, s, r);
}

/// The host loop over one chunk with 16-bit state arrays (Form<M, NarrowState>): blocks of
/// narrow_stage elements, each array's block widened into fp32 scratch (an f32 array is used
/// in place), the fp32 form's loop run over it, the scratch rounded back. The update reads the
/// same floats as the fp32 form would, so only the arrays' rounding differs.
template <class Policy, int V, class ParamT, class GradT, class F>
KOPT_LOOP_FUNCTION void narrow_host_loop(std::int64_t begin, std::int64_t end,
                                         ParamT* KOPT_RESTRICT param,
                                         const GradT* KOPT_RESTRICT grad,
                                         typename F::MasterT* KOPT_RESTRICT master, void* s0,
                                         void* s1, void* s2, const StateDTypes d,
                                         const typename Policy::Scalars s,
                                         const ChunkRounding r) {
  using MasterT = typename F::MasterT;
  using Wide = Form<MasterT, float>;
  constexpr bool stored = std::is_same_v<MasterT, float> || std::is_same_v<MasterT, std::uint16_t>;
  constexpr unsigned kept = Policy::arrays_of(V);
  constexpr std::int64_t ahead = update_prefetch_elements;
  float b0[narrow_stage], b1[narrow_stage], b2[narrow_stage];
  for (std::int64_t i = begin; i < end; i += narrow_stage) {
    const int n = static_cast<int>(end - i < narrow_stage ? end - i : narrow_stage);
    float* t0 = (kept & 1u) ? stage_in(d.of[0], s0, i, n, b0, ahead) : b0;
    float* t1 = (kept & 2u) ? stage_in(d.of[1], s1, i, n, b1, ahead) : b1;
    float* t2 = (kept & 4u) ? stage_in(d.of[2], s2, i, n, b2, ahead) : b2;
    MasterT* m = nullptr;
    if constexpr (stored && !std::is_same_v<ParamT, float>) m = master + i;
    fused_host_loop<Policy, V, ParamT, GradT, Wide, false>(0, n, param + i, grad + i, m, t0, t1,
                                                           t2, s, ChunkRounding{r.key, r.first + i});
    if constexpr ((kept & 1u) != 0) stage_out(d.of[0], s0, i, n, t0);
    if constexpr ((kept & 2u) != 0) stage_out(d.of[1], s1, i, n, t1);
    if constexpr ((kept & 4u) != 0) stage_out(d.of[2], s2, i, n, t2);
  }
}

/// One element with 16-bit state arrays (device teams): each kept array's element widened,
/// updated, and rounded back.
template <class Policy, int V, class ParamT, class GradT, class F>
KOKKOS_FORCEINLINE_FUNCTION void narrow_element(std::int64_t i, ParamT* KOPT_RESTRICT param,
                                                const GradT* KOPT_RESTRICT grad,
                                                typename F::MasterT* KOPT_RESTRICT master,
                                                void* s0, void* s1, void* s2,
                                                const StateDTypes& d,
                                                const typename Policy::Scalars& s,
                                                const ChunkRounding& r) {
  constexpr unsigned kept = Policy::arrays_of(V);
  float a0 = (kept & 1u) ? d.load(0, s0, i) : 0.0f;
  float a1 = (kept & 2u) ? d.load(1, s1, i) : 0.0f;
  float a2 = (kept & 4u) ? d.load(2, s2, i) : 0.0f;
  update_param<Policy, V, ParamT, GradT, Form<typename F::MasterT, float>>(i, param, grad, master,
                                                                          a0, a1, a2, s, r);
  if constexpr ((kept & 1u) != 0) d.store(0, s0, i, a0);
  if constexpr ((kept & 2u) != 0) d.store(1, s1, i, a1);
  if constexpr ((kept & 4u) != 0) d.store(2, s2, i, a2);
}

/// The fused update of every chunk in `chunks_`; the policy's variant V, ParamT/GradT and the
/// state's form F are chosen once on the host, so the element loop has no branch on them.
template <class ExecSpace, class Policy, int V, class ParamT, class GradT, class F>
struct FusedUpdateFunctor {
  using MasterT = typename F::MasterT;
  using StateT = typename F::StateT;
  using memory_space = typename ExecSpace::memory_space;
  using Scalars = typename Policy::Scalars;
  Kokkos::View<const UpdateSlot*, memory_space> slots_;
  Kokkos::View<const Scalars*, memory_space> scalars_;
  Kokkos::View<const Chunk*, memory_space> chunks_;
  /// The step each row of scalars_ makes (1 for the first): Rounding::stochastic's key.
  Kokkos::View<const std::int64_t*, memory_space> steps_;
  /// The state arrays' element types (NarrowState; all f32 otherwise).
  StateDTypes dtypes_{};

  static constexpr bool narrow = std::is_same_v<StateT, NarrowState>;

  /// Host: one chunk per iteration.
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const Chunk chunk = chunks_(c);
    const UpdateSlot& slot = slots_(chunk.slot);
    auto* param = static_cast<ParamT*>(slot.param);
    const auto* grad = static_cast<const GradT*>(slot.grad);
    if constexpr (narrow)
      narrow_host_loop<Policy, V, ParamT, GradT, F>(
          chunk.begin, chunk.end, param, grad, master_of(slot), slot.state[0], slot.state[1],
          slot.state[2], dtypes_, scalars_(slot.scalar_set), rounding_of(slot));
    else
      fused_host_loop<Policy, V, ParamT, GradT, F>(
          chunk.begin, chunk.end, param, grad, master_of(slot), state_of(slot, 0),
          state_of(slot, 1), state_of(slot, 2), scalars_(slot.scalar_set), rounding_of(slot));
  }

  /// Device: one team per chunk, its threads striding through it (coalesced).
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Chunk chunk = chunks_(team.league_rank());
    const UpdateSlot& slot = slots_(chunk.slot);
    const Scalars s = scalars_(slot.scalar_set);
    const ChunkRounding r = rounding_of(slot);
    auto* param = static_cast<ParamT*>(slot.param);
    const auto* grad = static_cast<const GradT*>(slot.grad);
    for (std::int64_t i = chunk.begin + team.team_rank(); i < chunk.end; i += team.team_size()) {
      if constexpr (narrow)
        narrow_element<Policy, V, ParamT, GradT, F>(i, param, grad, master_of(slot),
                                                    slot.state[0], slot.state[1], slot.state[2],
                                                    dtypes_, s, r);
      else
        fused_element<Policy, V, ParamT, GradT, F>(i, param, grad, master_of(slot),
                                                   state_of(slot, 0), state_of(slot, 1),
                                                   state_of(slot, 2), s, r);
    }
  }

  KOKKOS_FORCEINLINE_FUNCTION ChunkRounding rounding_of(const UpdateSlot& slot) const {
    if constexpr (std::is_same_v<MasterT, RoundStochastic>)
      return ChunkRounding{rounding_key(slot.rounding_stream, steps_(slot.scalar_set)),
                           slot.first_index};
    else
      return ChunkRounding{};
  }

  /// Array k as the compiled form's element type (float or bfloat16; not NarrowState).
  KOKKOS_FORCEINLINE_FUNCTION static auto* state_of(const UpdateSlot& slot, int k) {
    using T = std::conditional_t<narrow, float, StateT>;
    return static_cast<T*>(slot.state[k]);
  }

  KOKKOS_FORCEINLINE_FUNCTION static MasterT* master_of(const UpdateSlot& slot) {
    if constexpr (std::is_same_v<MasterT, float>)
      return slot.master;
    else if constexpr (std::is_same_v<MasterT, std::uint16_t>)
      return slot.remainder;
    else
      return nullptr;  // none stored
  }
};

/// Whether launch_chunks runs the device path (a league of teams) on host spaces too. Only
/// the host path runs where there is no GPU, as in CI: tests switch this on (ScopedTeamPaths)
/// to run every chunk kernel's team operator on Serial and OpenMP and compare it bitwise with
/// the host path, so an indexing bug in device code fails on any machine. Off otherwise; one
/// relaxed load per launch.
inline std::atomic<bool>& host_team_paths() {
  static std::atomic<bool> on{false};
  return on;
}
/// Sets host_team_paths() for its lifetime (not nested, not concurrent with other launches'
/// threads that must keep the host path).
struct ScopedTeamPaths {
  ScopedTeamPaths() { host_team_paths() = true; }
  ~ScopedTeamPaths() { host_team_paths() = false; }
  ScopedTeamPaths(const ScopedTeamPaths&) = delete;
  ScopedTeamPaths& operator=(const ScopedTeamPaths&) = delete;
};

/// Launches `functor` over `num_chunks` chunks on `exec`: a range over chunks on the host,
/// a league of teams on devices (and on the host under ScopedTeamPaths, with teams as large
/// as the space allows up to device_team_size: OpenMP's threads, Serial's one). Every kopt
/// chunk kernel goes through here.
template <class ExecSpace, class Functor>
void launch_chunks(const ExecSpace& exec, const std::string& label, std::int64_t num_chunks,
                   const Functor& functor) {
  if (num_chunks == 0) return;
  if constexpr (runs_on_host<ExecSpace>) {
    if (host_team_paths().load(std::memory_order_relaxed)) {
      const Kokkos::TeamPolicy<ExecSpace> probe(exec, static_cast<int>(num_chunks), 1);
      const int size =
          std::min(device_team_size, probe.team_size_max(functor, Kokkos::ParallelForTag()));
      Kokkos::parallel_for(
          label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(num_chunks), size), functor);
      return;
    }
    Kokkos::parallel_for(label,
                         Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>,
                                             Kokkos::IndexType<std::int64_t>>(exec, 0, num_chunks),
                         functor);
  } else {
    Kokkos::parallel_for(
        label, Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(num_chunks), device_team_size),
        functor);
  }
}

/// Calls `f` with a value of the C++ element type of `dtype` (float, bfloat16, float16).
template <class F>
void visit_update_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(bfloat16{});
      return;
    case DType::f16:
      f(float16{});
      return;
    default:
      break;
  }
  assert(false && "kopt: no kernel for this dtype; the registry should have refused it");
}

/// The master element a 16-bit param's next update starts from, after the training code may
/// have written the param: the master itself where it rounds to the param (the update's own
/// round to nearest even; bit patterns compared, so -0, Inf and NaN count exactly), else the
/// param widened. A checkpoint's fp32 master thus survives its own weights being loaded again,
/// and new weights win wherever they differ. A bf16 param also keeps a master whose tie it
/// rounds toward the truncation: weights saved beside remainder-kept masters
/// (MasterStorage::remainder, kopt/impl/param_remainder.hpp).
template <class ParamT>
KOKKOS_FORCEINLINE_FUNCTION float synced_master(float master, ParamT param) {
  bool keep = from_float<ParamT>(master).bits == param.bits;
  if constexpr (std::is_same_v<ParamT, bfloat16>)
    keep = keep || split_master(master).param.bits == param.bits;
  return keep ? master : to_float(param);
}

/// out[i] = synced_master(master[i], param[i]) over one span (out may be master): for a
/// RangePolicy on any space that reaches the three pointers.
template <class ParamT>
struct SyncSpanFunctor {
  const ParamT* param;
  const float* master;
  float* out;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    out[i] = synced_master(master[i], param[i]);
  }
};

/// out[i] = in[i] widened, over one span.
template <class T>
struct WidenSpanFunctor {
  const T* in;
  float* out;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const { out[i] = to_float(in[i]); }
};

/// out[i] = the master that bf16 param[i] and remainder[i] hold, over one span.
struct JoinSpanFunctor {
  const bfloat16* param;
  const std::uint16_t* remainder;
  float* out;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    out[i] = join_master(param[i], remainder[i]);
  }
};

/// master[i] = synced_master(master[i], param[i]) over chunks of 16-bit params, run before
/// the update of params whose masters may be stale (new, loaded or reloaded).
template <class ExecSpace, class ParamT>
struct SyncMasterFunctor {
  using memory_space = typename ExecSpace::memory_space;
  Kokkos::View<const UpdateSlot*, memory_space> slots_;
  Kokkos::View<const Chunk*, memory_space> chunks_;

  KOKKOS_FORCEINLINE_FUNCTION void sync(const UpdateSlot& slot, std::int64_t begin,
                                        std::int64_t end, std::int64_t stride) const {
    const ParamT* KOPT_RESTRICT param = static_cast<const ParamT*>(slot.param);
    float* KOPT_RESTRICT master = slot.master;
    for (std::int64_t i = begin; i < end; i += stride)
      master[i] = synced_master(master[i], param[i]);
  }
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t c) const {
    const Chunk chunk = chunks_(c);
    sync(slots_(chunk.slot), chunk.begin, chunk.end, 1);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Chunk chunk = chunks_(team.league_rank());
    sync(slots_(chunk.slot), chunk.begin + team.team_rank(), chunk.end, team.team_size());
  }
};

/// Launches the master sync of `chunks`, all of params of 16-bit `dtype`.
template <class ExecSpace>
void launch_sync(const ExecSpace& exec, const std::string& label, DType dtype,
                 const Kokkos::View<const UpdateSlot*, typename ExecSpace::memory_space>& slots,
                 const Kokkos::View<const Chunk*, typename ExecSpace::memory_space>& chunks) {
  visit_update_dtype(dtype, [&](auto param_type) {
    using P = decltype(param_type);
    if constexpr (!std::is_same_v<P, float>)  // f32 params have no master
      launch_chunks(exec, label, static_cast<std::int64_t>(chunks.extent(0)),
                    SyncMasterFunctor<ExecSpace, P>{slots, chunks});
  });
}

/// Calls f(std::integral_constant<int, V>{}) for the policy variant V == `variant`.
template <class Policy, int V = 0, class F>
void visit_variant(int variant, F&& f) {
  if constexpr (V < Policy::num_variants) {
    if (variant == V) return f(std::integral_constant<int, V>{});
    visit_variant<Policy, V + 1>(variant, std::forward<F>(f));
  } else {
    assert(false && "kopt: no such variant of the policy");
  }
}

/// Calls f(Form<M, S>{}) for the form of `storage` over a param of type ParamT: S float when
/// every state array is f32, bfloat16 when every one is bf16, else NarrowState; M of
/// storage.master (an f32 param is its own master whatever it says; remainders and stochastic
/// rounding are of bf16 params, which the engines check).
template <class ParamT, class Fn>
void visit_form(const StateStorage& storage, Fn&& f) {
  const auto with_master = [&](auto master) {
    using M = decltype(master);
    if (storage.wide()) return f(Form<M, float>{});
    if (storage.all(DType::bf16)) return f(Form<M, bfloat16>{});
    return f(Form<M, NarrowState>{});
  };
  if constexpr (!std::is_same_v<ParamT, float>) {
    if (storage.master == MasterStorage::none && storage.rounding == Rounding::nearest)
      return with_master(RoundToNearest{});
  }
  if constexpr (std::is_same_v<ParamT, bfloat16>) {
    if (storage.master == MasterStorage::remainder) return with_master(std::uint16_t{});
    if (storage.master == MasterStorage::none) return with_master(RoundStochastic{});
  }
  assert((std::is_same_v<ParamT, float> || storage.master == MasterStorage::f32));
  return with_master(float{});
}

/// Launches the fused update of `chunks` for one kernel class: the dtypes, the policy's
/// variant and the state's form (`storage`) are chosen here, once, so the element loop has
/// no branch on them.
template <class ExecSpace, class Policy>
void launch_update(
    const ExecSpace& exec, const std::string& label, DType param, DType grad, int variant,
    const StateStorage& storage,
    const Kokkos::View<const UpdateSlot*, typename ExecSpace::memory_space>& slots,
    const Kokkos::View<const typename Policy::Scalars*, typename ExecSpace::memory_space>& scalars,
    const Kokkos::View<const std::int64_t*, typename ExecSpace::memory_space>& steps,
    const Kokkos::View<const Chunk*, typename ExecSpace::memory_space>& chunks) {
  // Stochastic rounding keys its bits by each row's step.
  assert(storage.rounding != Rounding::stochastic || steps.extent(0) >= scalars.extent(0));
  const auto n = static_cast<std::int64_t>(chunks.extent(0));
  visit_update_dtype(param, [&](auto param_type) {
    visit_update_dtype(grad, [&](auto grad_type) {
      visit_variant<Policy>(variant, [&](auto v) {
        using P = decltype(param_type);
        using G = decltype(grad_type);
        visit_form<P>(storage, [&](auto form) {
          launch_chunks(exec, label, n,
                        FusedUpdateFunctor<ExecSpace, Policy, decltype(v)::value, P, G,
                                           decltype(form)>{slots, scalars, chunks, steps,
                                                           StateDTypes::from(storage)});
        });
      });
    });
  });
}

}  // namespace kopt::Impl
