#pragma once
/// \file
/// The fused update kernel over a chunk table: many tensors, one launch, any algorithm (the
/// element update is its policy's, kopt/impl/policy.hpp).
///
/// A group's tensors are cut into chunks of at most chunk_size elements (chunk_table.hpp);
/// one work item (a host iteration, or a device team) updates one chunk, so a step over
/// 10,000 small tensors is one launch of about the same cost as one tensor of the same total
/// size. Per-tensor pointers sit in a slot table, read once per chunk; each slot names its
/// step scalars in a table with one row per (group, step count) in use, so a steady-state
/// step rewrites that small table and not one slot per tensor.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/impl/chunk_runs.hpp>
#include <kopt/impl/chunk_table.hpp>
#include <kopt/impl/element_update.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/host_chunks.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <kopt/impl/team_paths.hpp>
#include <kopt/impl/update_dispatch.hpp>
#include <kopt/state_storage.hpp>
#include <kopt/storage_types.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kopt::Impl {

/// The fused update of every chunk in `chunks_` on a device (and on the default host space
/// under ScopedTeamPaths, kopt/impl/team_paths.hpp; host spaces otherwise take
/// HostUpdateFunctor, kopt/impl/host_chunks.hpp): a team per chunk. The policy's variant V,
/// ParamT/GradT and the state's form F are chosen once on the host, so the element loop has
/// no branch on them.
/// `Q8`: a NarrowState launch with a q8 array, whose device teams give each block a warp
/// (q8_blocks); a kernel of its own, as its scratch, reductions and registers would slow the
/// element loop of every other launch.
template <class ExecSpace, class Policy, int V, class ParamT, class GradT, class F, bool Q8 = false>
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
  /// Per slot, the rate of a policy with tensor sums or a tensor stage
  /// (kopt/impl/tensor_rates.hpp, tensor_stage.hpp); empty for the others.
  Kokkos::View<const float*, memory_space> rates_{};

  static constexpr bool narrow = std::is_same_v<StateT, NarrowState>;

  /// One team per chunk, its threads striding through it (coalesced).
  template <class Member>
  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Chunk chunk = chunks_(team.league_rank());
    const UpdateSlot& slot = slots_(chunk.slot);
    const Scalars s = chunk_scalars<Policy>(scalars_, rates_, chunk, slot);
    const ChunkRounding r = chunk_rounding(
        std::is_same_v<MasterT, RoundStochastic> || dtypes_.stochastic, steps_, slot);
    auto* param = static_cast<ParamT*>(slot.param);
    const auto* grad = static_cast<const GradT*>(slot.grad);
    if constexpr (Q8) {  // (an else: nvcc warns of a loop after a return as unreachable)
      q8_blocks(team, chunk, slot, param, grad, s, r);
    } else {
      for (std::int64_t i = chunk.begin + team.team_rank(); i < chunk.end; i += team.team_size()) {
        if constexpr (row_factored<Policy>) {
          const std::int64_t row = i / slot.cols;
          Scalars sr = s;
          sr.row = static_cast<const float*>(slot.state[1])[row];
          float a0 = static_cast<const float*>(slot.state[0])[i - row * slot.cols], a1 = 0.0f,
                a2 = 0.0f;
          update_param<Policy, V, ParamT, GradT, Form<MasterT, float>>(
              i, param, grad, slot_master<F>(slot), a0, a1, a2, sr, r);
        } else if constexpr (narrow) {
          narrow_element<Policy, V, ParamT, GradT, F>(i, param, grad, slot_master<F>(slot),
                                                      slot.state[0], slot.state[1], slot.state[2],
                                                      dtypes_, s, r);
        } else
          fused_element<Policy, V, ParamT, GradT, F>(i, param, grad, slot_master<F>(slot),
                                                     slot_state<F>(slot, 0), slot_state<F>(slot, 1),
                                                     slot_state<F>(slot, 2), s, r);
      }
    }
  }

  /// Scratch a launch needs per team thread: q8 arrays' new values of one block, until its
  /// scale is known (q8_blocks).
  static int thread_scratch_bytes() {
    return Q8 ? static_cast<int>(max_state_arrays * q8_block * sizeof(float)) : 0;
  }
  /// Vector lanes per team thread on devices: q8 launches give each block a warp.
  static constexpr int vector_lanes = Q8 ? 32 : 1;

  /// Device, with q8 arrays: each team thread (a warp of vector lanes on a GPU; one thread
  /// on a host) takes whole blocks of the chunk. Its lanes update their elements (q8 ones
  /// decoded), store 16-bit and f32 arrays at once and keep q8 ones in the thread's scratch;
  /// then, per q8 array, the lanes find the block's largest magnitude (a vector reduction:
  /// shuffles, no barrier), encode their own elements against its scale, and one lane
  /// writes the scale. Each lane reads back only what it wrote (the vector ranges map an
  /// index to the same lane), so nothing waits for the others. A team per block, with a team
  /// reduction and two barriers per block, ran at 0.14 of the q8 row's ceiling on an H200;
  /// a shared-memory atomic max per element in place of the reduction, 0.12.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void q8_blocks(const Member& team, const Chunk& chunk,
                                        const UpdateSlot& slot, ParamT* param, const GradT* grad,
                                        const Scalars& s, const ChunkRounding& r) const {
    constexpr unsigned kept = Policy::arrays_of(V);
    using Scratch = Kokkos::View<float*, typename ExecSpace::scratch_memory_space,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const Scratch held(team.thread_scratch(0), max_state_arrays * q8_block);
    const std::int64_t stride = static_cast<std::int64_t>(team.team_size()) * q8_block;
    for (std::int64_t b = chunk.begin + team.team_rank() * q8_block; b < chunk.end; b += stride) {
      const int n = static_cast<int>(chunk.end - b < q8_block ? chunk.end - b : q8_block);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const int j) {
        const std::int64_t i = b + j;
        float a[max_state_arrays] = {};
        for (int k = 0; k < static_cast<int>(max_state_arrays); ++k)
          if ((kept >> k & 1u) != 0) a[k] = dtypes_.load(k, slot.state[k], i);
        update_param<Policy, V, ParamT, GradT, Form<MasterT, float>>(
            i, param, grad, slot_master<F>(slot), a[0], a[1], a[2], s, r);
        for (int k = 0; k < static_cast<int>(max_state_arrays); ++k) {
          if ((kept >> k & 1u) == 0) continue;
          if (dtypes_.of[k] == DType::q8)
            held(k * q8_block + j) = a[k];
          else
            dtypes_.store(k, slot.state[k], i, a[k], r);
        }
      });
      for (int k = 0; k < static_cast<int>(max_state_arrays); ++k) {
        if ((kept >> k & 1u) == 0 || dtypes_.of[k] != DType::q8) continue;
        std::uint32_t amax = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, n),
            [&](const int j, std::uint32_t& m) {
              const std::uint32_t a = float_bits(held(k * q8_block + j)) & 0x7fffffffu;
              m = a > m ? a : m;
            },
            Kokkos::Max<std::uint32_t>(amax));
        unsigned char* block = q8_block_of(slot.state[k], b);
        const bool root = dtypes_.root(k);
        const float scale = root ? q8_scale<true>(amax) : q8_scale<false>(amax);
        const float inv = 1.0f / scale;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, n), [&](const int j) {
          const float x = held(k * q8_block + j);
          if (dtypes_.stochastic) {
            const std::uint32_t bits = r.array_bits(k, b + j);
            block[j] = root ? q8_encode_stochastic<true>(x, inv, bits)
                            : q8_encode_stochastic<false>(x, inv, bits);
          } else {
            block[j] = root ? q8_encode<true>(x, inv) : q8_encode<false>(x, inv);
          }
        });
        Kokkos::single(Kokkos::PerThread(team),
                       [&] { std::memcpy(block + q8_block, &scale, sizeof scale); });
      }
    }
  }
};

/// Launches `functor` over `num_chunks` chunks on host space `exec`, one iteration per chunk,
/// dynamically scheduled (chunks of small params cost less than full ones).
template <class ExecSpace, class Functor>
void launch_range(const ExecSpace& exec, const std::string& label, std::int64_t num_chunks,
                  const Functor& functor) {
  Kokkos::parallel_for(label,
                       Kokkos::RangePolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>,
                                           Kokkos::IndexType<std::int64_t>>(exec, 0, num_chunks),
                       functor);
}

/// Launches `functor` over `num_chunks` chunks as a league of teams: on devices, and on
/// host spaces under ScopedTeamPaths, with teams as large as the space allows up to
/// device_team_size (OpenMP's threads, Serial's one).
template <class ExecSpace, class Functor>
void launch_teams(const ExecSpace& exec, const std::string& label, std::int64_t num_chunks,
                  const Functor& functor) {
  // Scratch, for kernels that ask for it (team_scratch_bytes, thread_scratch_bytes).
  const auto with_scratch = [&](Kokkos::TeamPolicy<ExecSpace> policy) {
    if constexpr (requires { functor.team_scratch_bytes(); })
      if (functor.team_scratch_bytes() > 0)
        policy.set_scratch_size(0, Kokkos::PerTeam(functor.team_scratch_bytes()));
    if constexpr (requires { functor.thread_scratch_bytes(); })
      if (functor.thread_scratch_bytes() > 0)
        policy.set_scratch_size(0, Kokkos::PerThread(functor.thread_scratch_bytes()));
    return policy;
  };
  if constexpr (runs_on_host<ExecSpace>) {
    const auto probe =
        with_scratch(Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(num_chunks), 1));
    const int size =
        std::min(device_team_size, probe.team_size_max(functor, Kokkos::ParallelForTag()));
    Kokkos::parallel_for(
        label,
        with_scratch(Kokkos::TeamPolicy<ExecSpace>(exec, static_cast<int>(num_chunks), size)),
        functor);
  } else {
    // Vector lanes per team thread on devices (vector_lanes; 1 where not given).
    constexpr int lanes = [] {
      if constexpr (requires { Functor::vector_lanes; })
        return Functor::vector_lanes;
      else
        return 1;
    }();
    Kokkos::parallel_for(label,
                         with_scratch(Kokkos::TeamPolicy<ExecSpace>(
                             exec, static_cast<int>(num_chunks), device_team_size / lanes, lanes)),
                         functor);
  }
}

/// Launches `functor` over `num_chunks` chunks on `exec`: a range over chunks on the host,
/// a league of teams on devices (and on the host under ScopedTeamPaths). Every kopt chunk
/// kernel goes through here, or through launch_range and launch_teams as it does.
template <class ExecSpace, class Functor>
void launch_chunks(const ExecSpace& exec, const std::string& label, std::int64_t num_chunks,
                   const Functor& functor) {
  if (num_chunks == 0) return;
  if constexpr (runs_on_host<ExecSpace>)
    if (!takes_device_paths<ExecSpace>()) return launch_range(exec, label, num_chunks, functor);
  if constexpr (has_device_paths<ExecSpace>) launch_teams(exec, label, num_chunks, functor);
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

/// out[i] = element i of a q8 array whose element 0 starts the block at `blocks`.
struct DecodeSpanFunctor {
  const unsigned char* blocks;
  float* out;
  bool root;
  KOKKOS_INLINE_FUNCTION void operator()(const std::int64_t i) const {
    const unsigned char* block = q8_block_of(const_cast<unsigned char*>(blocks), i);
    const float scale = q8_scale_of(block);
    out[i] = root ? q8_decode<true>(block[i % q8_block], scale)
                  : q8_decode<false>(block[i % q8_block], scale);
  }
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

/// The device path of launch_update: a team kernel per combination of the dtypes, the
/// policy's variant and the state's form. On the default host space (where tests run it
/// under ScopedTeamPaths) it is compiled in a file of its own, unoptimized
/// (backends/host/host_team_paths.cpp, CMakeLists.txt): users' steps never take it there, and
/// its kernels were three quarters of fused_openmp.cpp's compile time (GCC 12, -O3).
template <class ExecSpace, class Policy>
void launch_update_teams(
    const ExecSpace& exec, const std::string& label, DType param, DType grad, int variant,
    const StateStorage& storage,
    const Kokkos::View<const UpdateSlot*, typename ExecSpace::memory_space>& slots,
    const Kokkos::View<const typename Policy::Scalars*, typename ExecSpace::memory_space>& scalars,
    const Kokkos::View<const std::int64_t*, typename ExecSpace::memory_space>& steps,
    const Kokkos::View<const Chunk*, typename ExecSpace::memory_space>& chunks,
    const Kokkos::View<const float*, typename ExecSpace::memory_space>& rates) {
  const auto n = static_cast<std::int64_t>(chunks.extent(0));
  const StateDTypes dtypes = StateDTypes::from(storage, q8_roots_of<Policy>());
  visit_update_dtype(param, [&](auto param_type) {
    visit_update_dtype(grad, [&](auto grad_type) {
      visit_variant<Policy>(variant, [&](auto v) {
        using P = decltype(param_type);
        using G = decltype(grad_type);
        visit_form<P>(storage, [&](auto form) {
          using F = decltype(form);
          const auto launch = [&](auto q8) {
            launch_teams(exec, label, n,
                         FusedUpdateFunctor<ExecSpace, Policy, decltype(v)::value, P, G, F,
                                            decltype(q8)::value>{slots, scalars, chunks, steps,
                                                                 dtypes, rates});
          };
          if constexpr (has_q8_state<Policy> && std::is_same_v<typename F::StateT, NarrowState>)
            if (storage.any(DType::q8)) return launch(std::true_type{});
          launch(std::false_type{});
        });
      });
    });
  });
}

/// Launches the fused update of `chunks` for one kernel class: the dtypes, the policy's
/// variant and the state's form (`storage`) are chosen here, once, so the element loop has
/// no branch on them. Host spaces run the chunk function compiled for them all
/// (host_chunk_fn), devices (and ScopedTeamPaths) a team kernel per combination
/// (launch_update_teams).
template <class ExecSpace, class Policy>
void launch_update(
    const ExecSpace& exec, const std::string& label, DType param, DType grad, int variant,
    const StateStorage& storage,
    const Kokkos::View<const UpdateSlot*, typename ExecSpace::memory_space>& slots,
    const Kokkos::View<const typename Policy::Scalars*, typename ExecSpace::memory_space>& scalars,
    const Kokkos::View<const std::int64_t*, typename ExecSpace::memory_space>& steps,
    const Kokkos::View<const Chunk*, typename ExecSpace::memory_space>& chunks,
    const Kokkos::View<const float*, typename ExecSpace::memory_space>& rates = {}) {
  // Stochastic rounding keys its bits by each row's step.
  assert(!storage.keyed() || steps.extent(0) >= scalars.extent(0));
  const auto n = static_cast<std::int64_t>(chunks.extent(0));
  if (n == 0) return;
  launched_update_chunks().fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  if constexpr (runs_on_host<ExecSpace>) {
    if (!takes_device_paths<ExecSpace>())
      return launch_range(
          exec, label, n,
          HostUpdateFunctor<ExecSpace, Policy>{
              host_chunk_fn<Policy>(param, grad, variant, storage), slots, scalars, chunks, steps,
              rates, StateDTypes::from(storage, q8_roots_of<Policy>()), storage.keyed()});
  }
  if constexpr (has_device_paths<ExecSpace>)
    launch_update_teams<ExecSpace, Policy>(exec, label, param, grad, variant, storage, slots,
                                           scalars, steps, chunks, rates);
}

}  // namespace kopt::Impl
