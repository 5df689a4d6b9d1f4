#pragma once
/// \file
/// kopt::FusedOptimizer: the engine that runs one algorithm (a policy, kopt/impl/policy.hpp)
/// over many parameters whose memory an execution space can reach. It keeps the optimizer
/// state (the policy's arrays, fp32 masters of 16-bit params) in that space and updates every
/// parameter in one launch per (param dtype, grad dtype, policy variant) class present,
/// normally one. kopt::FusedAdam is its Adam form.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/error.hpp>
#include <kopt/grad_norm.hpp>
#include <kopt/impl/backends.hpp>
#include <kopt/impl/engine_state.hpp>
#include <kopt/impl/moved_from.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/impl/policies.hpp>
#include <kopt/impl/state_arrays.hpp>
#include <kopt/impl/tensor_rates.hpp>
#include <kopt/impl/tensor_stage.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <kopt/tensor.hpp>
#include <string>
#include <vector>

namespace kopt {

/// Read-only handles on one parameter's state, in the engine's memory space.
template <class MemSpace, std::size_t NumArrays>
struct StateView {
  /// The policy's arrays (Policy::array_names); empty where no group keeps one yet. An
  /// array stored in 16 or 8 bits (StateStorage::dtype_of) is a copy widened from the
  /// engine's own (bf16_arrays, f16_arrays, q8_arrays).
  std::array<Kokkos::View<const float*, MemSpace>, NumArrays> arrays;
  /// The engine's own arrays of dtype bf16 (else empty).
  std::array<Kokkos::View<const bfloat16*, MemSpace>, NumArrays> bf16_arrays;
  /// The engine's own arrays of dtype f16 (else empty).
  std::array<Kokkos::View<const float16*, MemSpace>, NumArrays> f16_arrays;
  /// The engine's own arrays of dtype q8 (else empty): the param's blocks, 260 bytes per 256
  /// elements (kopt/impl/block_q8.hpp).
  std::array<Kokkos::View<const unsigned char*, MemSpace>, NumArrays> q8_arrays;
  /// Empty for fp32 params; under MasterStorage::remainder, a copy joined from the param
  /// and its remainder; under MasterStorage::none, the param widened.
  Kokkos::View<const float*, MemSpace> master;
  /// The masters' remainders (MasterStorage::remainder; else empty): the engine's own array.
  Kokkos::View<const std::uint16_t*, MemSpace> remainder;
  std::int64_t step = 0;  ///< completed updates
};

template <class ExecSpace, class Policy>
class FusedOptimizer {
 public:
  using execution_space = ExecSpace;
  using memory_space = typename ExecSpace::memory_space;
  using Config = typename Policy::Config;
  using State = StateView<memory_space, Policy::num_arrays>;

  /// An engine with one group (index 0) of `config`; validates it. Allocates nothing.
  /// `storage`: how the state is stored (kopt::StateStorage: with MasterStorage::remainder,
  /// every 16-bit param must be bf16; state arrays of f32, bf16 or f16, and q8 for Adam).
  /// Validated.
  explicit FusedOptimizer(const ExecSpace& exec, const Config& config = Config{},
                          std::string label = "kopt::FusedOptimizer",
                          const StateStorage& storage = {});

  /// Adds a group with its own hyperparameters; returns its index. Validates first.
  std::size_t add_group(const Config& config);
  std::size_t num_groups() const { return registry_.num_groups(); }
  /// A group's config, mutable between steps (schedules); step() validates it.
  Config& config(std::size_t group = 0) {
    check_alive_("config");
    return std::get<Config>(registry_.config(group));
  }
  const Config& config(std::size_t group = 0) const {
    check_alive_("config");
    return std::get<Config>(registry_.config(group));
  }

  /// Registers `param` (updated in place) with `grad` under a unique `name` in `group`.
  /// Both must live where this engine's execution space can reach them, be f32, bf16 or
  /// f16, and have equal numel; a null grad means no gradient yet (a policy that works on
  /// whole matrices, Muon, also needs a 2-D shape: Tensor::matrix). A 16-bit param gets an
  /// fp32 master copy, taken from the param by its first update (the param may be written
  /// until then). Throws a kopt::Error and changes nothing on bad input.
  void add(const std::string& name, const Tensor& param, const Tensor& grad, std::size_t group = 0);
  /// Replaces the grad of `name`; a null Tensor means no gradient this step (the param and
  /// its state are then left untouched by step()). Validates first.
  void set_grad(const std::string& name, const Tensor& grad) {
    check_alive_("set_grad");
    registry_.set_grad(name, grad);
  }
  /// Points `name` at new memory (a framework replaced its tensors): same numel and dtype,
  /// reachable from this engine. Its state (moments, master, step count) is kept: the new
  /// param must hold the same values as the old one. Validates first.
  void rebind(const std::string& name, const Tensor& param, const Tensor& grad) {
    check_alive_("rebind");
    registry_.rebind(name, param, grad);
  }

  /// Sum of squares of every present grad, computed on the execution space (blocks until it
  /// is done), rounded once to double from an exact sum: the same bits in whatever order or
  /// engines the grads sit (see kopt/grad_norm.hpp). +Inf or NaN when any grad element is not
  /// finite. Elements of a shard's cut edge blocks that the engine does not hold count as 0.
  double grad_sum_of_squares();
  /// The same, unrounded: the exact sum over whole blocks, and the edge fragments of cut
  /// blocks for the caller to combine with other engines' and ranks' (the optimizer does).
  void grad_norm_parts(Impl::NormParts& out);

  /// Allocates whatever the next step() needs (state of new params, the chunk tables for the
  /// params that have grads now). step() calls it first; called before, it makes the step
  /// itself free of allocation. On failure (std::bad_alloc, a Kokkos allocation error) every
  /// value is as before and a later call retries.
  void prepare_step();

  /// One step of every param that has a grad, with the grads multiplied by
  /// `grad_scale` (unscale / clip; must be finite). Enqueues the work on the execution space
  /// instance and returns without waiting: fence it before reading params on the host.
  /// Validates every config and argument before touching anything. A policy with per-param
  /// sums (LAMB) measures its params first; a sharded owner passes `param_sums` instead:
  /// each entry's sums over its whole param (measure_param_sums() of every rank, joined).
  void step(double grad_scale = 1.0, const std::vector<Impl::ExactSum>* param_sums = nullptr);

  /// A policy with per-param sums: this engine's part of this step's sums, `tensor_sums` per
  /// entry in registry order (zeros for entries without a grad); nothing for other policies.
  /// Blocks. step() must follow with the same grad_scale.
  void measure_param_sums(double grad_scale, std::vector<Impl::ExactSum>& out);

  /// Call after the training code wrote new weights into the params: each param's next
  /// update first reconciles its fp32 master with it, element by element (the param
  /// widened where the master does not round to it; the exact master kept where it does,
  /// so a set_state() master survives its own weights). Launches nothing itself.
  void reload_model_params();

  std::size_t size() const { return registry_.size(); }
  /// Elements of the param `name`.
  std::int64_t numel(const std::string& name) const {
    check_alive_("numel");
    return registry_[registry_.index_of(name)].param.numel;
  }
  const std::string& label() const { return label_; }
  /// Completed updates of `name`.
  std::int64_t step_count(const std::string& name) const {
    check_alive_("step_count");
    return registry_.step(registry_.index_of(name));
  }
  /// The state of `name` (allocating the engine's state first if needed). The master of a
  /// param not updated since it was added, loaded or reloaded is the one its next update
  /// would start from given the param now (a copy; the engine's changes only then).
  State state(const std::string& name);
  /// Elements [offset, offset + count) of the state of `name`, copied into host arrays of
  /// count floats, indexed as Impl::StateArray (the policy's arrays, then kMaster); a null
  /// array is not read. As state() gives them: an array no group keeps yet reads as zeros
  /// (what it would start from), a master still to be reconciled as its next update would
  /// take it; an f32 param has no master (null it). Blocks. With write_state() and
  /// commit_state(), moves a large param's state in bounded pieces.
  void read_state(const std::string& name, std::int64_t offset, std::int64_t count,
                  const Impl::StateArrays<float>& out);
  /// Overwrites elements [offset, offset + count) of the state of `name` from host arrays of
  /// count floats (null: left as it is; an array no group keeps, an f32 param's master:
  /// ignored). Blocks. The step count and the master's reconciliation wait for commit_state().
  void write_state(const std::string& name, std::int64_t offset, std::int64_t count,
                   const Impl::StateArrays<const float>& in);
  /// After write_state() of every piece: sets the step count of `name` (in [0,
  /// kopt::max_step_count]) and flags its master to be reconciled with the param at its
  /// next update (the param's weights may be written before or after).
  void commit_state(const std::string& name, std::int64_t step);
  /// The per-param state of `name` (not per element: Adafactor's row_var then col_var for
  /// a matrix, variance for a vector), as host floats; empty for a policy without any.
  /// Zeros until its first update. Blocks.
  std::vector<float> tensor_state(const std::string& name);
  /// Overwrites the per-param state of `name` with `values`, which must have
  /// tensor_state()'s size (else InvalidArgument, nothing changed). Blocks.
  void set_tensor_state(const std::string& name, const std::vector<float>& values);
  /// Keeps the policy's arrays in `arrays` (bit k: Policy::array_names[k]) for every param
  /// from the next allocation on, whether or not a group's config uses them, so that
  /// write_state() can restore an array a config has switched off (it keeps its values
  /// until a config switches it on again, as torch keeps a state entry). Bits beyond the
  /// policy's arrays are an InvalidArgument.
  void keep_state_arrays(unsigned arrays);
  /// The policy's arrays this engine holds now (bit k: Policy::array_names[k]): those a
  /// group has used, or keep_state_arrays() asked for, once allocated.
  unsigned held_state_arrays() const { return state_.held(); }
  /// Bytes of optimizer state this engine holds in its memory space (0 once moved from).
  std::size_t state_bytes() const;
  /// Bytes of everything else it keeps allocated there between steps: its chunk and slot
  /// tables, partial sums, and per-tensor workspaces (Muon's directions and Newton-Schulz
  /// scratch, Adafactor's factors). Grown by the steps that need more; never shrunk.
  std::size_t workspace_bytes() const;
  const ExecSpace& exec() const { return exec_; }
  /// How the state is stored.
  const StateStorage& storage() const { return state_.storage(); }

 private:
  /// Throws kopt::InvalidArgument naming `call` in a moved-from engine: it holds no params,
  /// so a step would update nothing and a name would be reported unknown.
  void check_alive_(const char* call) const {
    KOPT_THROW_IF_AS(InvalidArgument, !alive_.yes,
                     "kopt::FusedOptimizer::" << call << ": this optimizer was moved from; it "
                                              << "holds no params or state");
  }

  using FloatView = Kokkos::View<float*, memory_space>;
  using Scalars = typename Policy::Scalars;
  using ClassKey = Impl::ClassKey;
  struct KernelClass {
    ClassKey key;
    Kokkos::View<Impl::Chunk*, memory_space> chunks;  ///< each param's own
    /// What the update launches: `chunks` with params that continue each other joined
    /// (kopt/impl/chunk_runs.hpp); `chunks` itself where none do.
    Kokkos::View<Impl::Chunk*, memory_space> runs;
  };

  void ensure_state_();
  void build_plan_();  ///< prepare_step()'s: classes, sync tables, slots, scalar sets
  void fill_slots_();
  void join_runs_();  ///< each class's runs, from the slots
  void build_sync_(const std::vector<std::size_t>& entries);
  FloatView synced_master_(std::size_t i);  ///< entry i's master as its next update takes it
  void build_classes_(const std::vector<int>& signature, const std::vector<ClassKey>& keys);
  void begin_step_(double grad_scale);  ///< step()'s part before the rates and the update
  std::vector<Kokkos::View<Impl::Chunk*, memory_space>> class_chunks_() const;

  ExecSpace exec_;
  std::string label_;
  Impl::ParamRegistry registry_;
  Impl::EngineState<memory_space, Policy> state_;  ///< the policy's arrays, 16-bit masters
  Kokkos::View<Impl::UpdateSlot*, memory_space> slots_;
  typename Kokkos::View<Impl::UpdateSlot*, memory_space>::HostMirror slots_host_;
  std::vector<int> signature_;  ///< per entry: kernel class + 1, or 0 if skipped
  std::vector<KernelClass> classes_;
  Impl::GradNorms<ExecSpace> norms_;  ///< over every present grad, any class
  std::vector<int> next_signature_;   ///< step()'s scratch
  std::vector<ClassKey> next_keys_;
  /// The master sync step() runs first: entries (flagged, updated) and their chunk tables.
  struct SyncTable {
    DType dtype;
    Kokkos::View<Impl::Chunk*, memory_space> chunks;
  };
  std::vector<std::size_t> sync_entries_, next_sync_;
  std::vector<SyncTable> sync_tables_;
  /// The step plan (classes, sync tables, slots, scalar sets) is kept while the registry's
  /// version, every group's variant and the state arrays stay as they were, so a
  /// steady-state step touches each param once (its step count), not once per table.
  Impl::PlanStamp<Policy> planned_;   ///< what the tables were built for
  std::vector<std::size_t> updated_;  ///< entries with a grad, in order
  /// One row of step scalars per (group, step count) among the updated entries; the slots
  /// name their row, so a step rewrites this table only.
  struct ScalarSet {
    std::size_t group;
    std::int64_t step;
  };
  std::vector<ScalarSet> sets_;
  Kokkos::View<Scalars*, memory_space> scalars_;
  typename Kokkos::View<Scalars*, memory_space>::HostMirror scalars_host_;
  /// The step each row makes (Rounding::stochastic keys its bits by it; else empty).
  Impl::TensorRates<ExecSpace, Policy> rates_;  ///< per-param rates (LAMB's trust ratios)
  Impl::TensorStage<ExecSpace, Policy> stage_;  ///< per-param transforms (Muon's)
  Kokkos::View<std::int64_t*, memory_space> row_steps_;
  typename Kokkos::View<std::int64_t*, memory_space>::HostMirror row_steps_host_;
  Impl::Alive alive_;  ///< false once moved from: check_alive_()
};

}  // namespace kopt

namespace kopt {
// Every algorithm's engine is compiled into the library for every space of the build
// (backends/<space>/fused_<space>.cpp): code that includes the member definitions
// (fused_optimizer_def.hpp: the tests, the perf suite) links those instead of compiling the
// kernels again.
#define KOPT_EXTERN_FUSED_OPTIMIZER(Space, Policy) \
  extern template class FusedOptimizer<Space, Policy>;
#define KOPT_EXTERN_FUSED_OPTIMIZERS(Space) KOPT_FOR_EACH_POLICY(KOPT_EXTERN_FUSED_OPTIMIZER, Space)
KOPT_FOR_EACH_BACKEND(KOPT_EXTERN_FUSED_OPTIMIZERS)
#undef KOPT_EXTERN_FUSED_OPTIMIZERS
#undef KOPT_EXTERN_FUSED_OPTIMIZER

// Likewise the update kernels of every algorithm and space, which the offload engines launch
// on the host (offload_host.cpp, offload_cuda.cpp): compiled there again, they were two
// fifths of the library's compile time (5,417 of offload_host.o's 5,792 symbols were
// fused_openmp.o's). `prefix`: extern, or nothing for the definition (fused_<space>.cpp).
#define KOPT_LAUNCH_UPDATE(prefix, Space, Policy)                               \
  prefix template void Impl::launch_update<Space, Policy>(                      \
      const Space&, const std::string&, DType, DType, int, const StateStorage&, \
      const Kokkos::View<const Impl::UpdateSlot*, Space::memory_space>&,        \
      const Kokkos::View<const Policy::Scalars*, Space::memory_space>&,         \
      const Kokkos::View<const std::int64_t*, Space::memory_space>&,            \
      const Kokkos::View<const Impl::Chunk*, Space::memory_space>&,             \
      const Kokkos::View<const float*, Space::memory_space>&);
#define KOPT_EXTERN_LAUNCH_UPDATE(Space, Policy) KOPT_LAUNCH_UPDATE(extern, Space, Policy)
#define KOPT_EXTERN_LAUNCH_UPDATES(Space) KOPT_FOR_EACH_POLICY(KOPT_EXTERN_LAUNCH_UPDATE, Space)
KOPT_FOR_EACH_BACKEND(KOPT_EXTERN_LAUNCH_UPDATES)
#undef KOPT_EXTERN_LAUNCH_UPDATES
#undef KOPT_EXTERN_LAUNCH_UPDATE

// And the device path of the update on the default host space, which only tests take
// (ScopedTeamPaths): compiled once, unoptimized (CMakeLists.txt), in
// backends/host/host_team_paths.cpp (kopt/impl/update_kernel.hpp, launch_update_teams).
#define KOPT_HOST_TEAM_PATHS(prefix, Policy)                                                 \
  prefix template void Impl::launch_update_teams<Kokkos::DefaultHostExecutionSpace, Policy>( \
      const Kokkos::DefaultHostExecutionSpace&, const std::string&, DType, DType, int,       \
      const StateStorage&, const Kokkos::View<const Impl::UpdateSlot*, Kokkos::HostSpace>&,  \
      const Kokkos::View<const Policy::Scalars*, Kokkos::HostSpace>&,                        \
      const Kokkos::View<const std::int64_t*, Kokkos::HostSpace>&,                           \
      const Kokkos::View<const Impl::Chunk*, Kokkos::HostSpace>&,                            \
      const Kokkos::View<const float*, Kokkos::HostSpace>&);
#define KOPT_EXTERN_HOST_TEAM_PATHS(unused, Policy) KOPT_HOST_TEAM_PATHS(extern, Policy)
KOPT_FOR_EACH_POLICY(KOPT_EXTERN_HOST_TEAM_PATHS, )
#undef KOPT_EXTERN_HOST_TEAM_PATHS

// And the host spaces' chunk functions (kopt/impl/host_chunks.hpp), the same code for Serial
// and OpenMP: compiled once, in backends/host/host_chunks_<algorithm>.cpp (Serial and
// OpenMP compiled their own copies: 2.8 MB of each kernel file's object code was the other's).
// A chunk function is chosen per launch on the host and called per chunk.
#define KOPT_HOST_CHUNK_FN(prefix, Policy)                                                 \
  prefix template Impl::HostChunkFn<Policy> Impl::host_chunk_fn<Policy>(DType, DType, int, \
                                                                        const StateStorage&);
#define KOPT_EXTERN_HOST_CHUNK_FN(unused, Policy) KOPT_HOST_CHUNK_FN(extern, Policy)
KOPT_FOR_EACH_POLICY(KOPT_EXTERN_HOST_CHUNK_FN, )
#undef KOPT_EXTERN_HOST_CHUNK_FN
}  // namespace kopt
