#pragma once
/// \file
/// kopt::HybridOptimizer: the object a training code holds. It owns the parameter groups,
/// builds once a plan of engines by (memory space, dtype) of the params, and each step()
/// computes the global grad norm where the grads live, decides clipping and loss scaling on
/// the host, and runs every engine's fused update with one grad_scale.

#include <cstdint>
#include <exception>
#include <kopt/checkpoint.hpp>
#include <kopt/impl/moved_from.hpp>
#include <kopt/loss_scaler.hpp>
#include <kopt/offload_options.hpp>
#include <kopt/param_group.hpp>
#include <kopt/sharding.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kopt {

class HybridOptimizer;
namespace Impl {
class Engine;
class ShardStrategy;
struct ExactSum;
/// kopt/impl/rank_agreement.hpp (the C interface's collective calls).
void agree_on_arguments(HybridOptimizer& opt, const std::string& call, std::exception_ptr failed);
}  // namespace Impl

struct HybridOptions {
  /// Clip the global L2 norm of all grads (all groups, all spaces) to this value, as
  /// torch.nn.utils.clip_grad_norm_: grads are scaled by min(1, max / (norm + 1e-6)) inside
  /// the update kernel. Off (no clipping) when unset, the default.
  std::optional<double> max_grad_norm = std::nullopt;
  /// Dynamic loss scaling for fp16: grads arrive multiplied by loss_scale(); off by default.
  std::optional<LossScalerOptions> loss_scaling = std::nullopt;
  /// Which device params have their state in host memory besides the StatePlacement::host
  /// groups, and how their pipeline runs.
  OffloadOptions offload = {};
  /// Shard the state across the ranks of a data-parallel world (ZeRO-1/2); off (every
  /// rank keeps all of it) when unset. See kopt/sharding.hpp.
  std::optional<ShardingOptions> sharding = std::nullopt;
};

/// What one step did.
struct StepStats {
  double grad_norm;    ///< global L2 norm of the unscaled grads; NaN if not computed
  double clip_factor;  ///< multiplier applied to the unscaled grads (1: no clipping)
  bool skipped;        ///< non-finite grads: nothing was updated anywhere
  double loss_scale;   ///< the scale for the next backward pass (1 without loss scaling)
};

class HybridOptimizer {
 public:
  /// Validates every group, name, tensor and option, then builds the engines; throws a
  /// kopt::Error (NotCompiled for a memory space this build lacks) and builds nothing on
  /// bad input. Names must be unique across all groups. Sharded: collective; when the
  /// checks fail on some rank, or the ranks' groups, names, sizes or options differ, every
  /// rank throws (see kopt/impl/rank_agreement.hpp).
  explicit HybridOptimizer(std::vector<ParamGroup> groups, const HybridOptions& options = {});
  ~HybridOptimizer();
  HybridOptimizer(HybridOptimizer&&) noexcept;
  HybridOptimizer& operator=(HybridOptimizer&&) noexcept;

  /// One optimizer step over every param that has a grad. When clipping or loss scaling is
  /// on, first reduces the grads' sum of squares on each engine (this blocks); a non-finite
  /// result skips the whole step (no param, state or step count changes) and backs the loss
  /// scale off. Then enqueues every engine's update and waits for all of them.
  /// Validates every group's config first and changes nothing if one is invalid.
  /// Sharded (HybridOptions::sharding): collective, every rank calls it; ZeRO-2 first
  /// reduce-scatters the grads, and the updated params are all-gathered before it returns.
  /// Before any of that the ranks agree: when the checks (configs, allocations) fail on one
  /// rank, or the ranks' group configs (a schedule stepped on one rank only) or null grads
  /// differ, every rank throws and nothing changes anywhere.
  StepStats step();

  /// A group as the optimizer holds it: its config is mutable between steps (schedules);
  /// the next step uses the new values on every path. Params cannot be added after
  /// construction.
  class Group {
   public:
    /// The config as its algorithm's type (ParamGroup::config): `config().lr` for Adam,
    /// `config<SgdConfig>().momentum` for SGD. The algorithm itself cannot change.
    template <class C = AdamConfig>
    C& config() {
      return group_->config<C>();
    }
    template <class C = AdamConfig>
    const C& config() const {
      return group_->config<C>();
    }
    const AlgorithmConfig& algorithm() const { return group_->algorithm(); }
    /// Names of the group's params, in registration order.
    std::vector<std::string> names() const;

   private:
    friend class HybridOptimizer;
    explicit Group(ParamGroup* group) : group_(group) {}
    ParamGroup* group_;
  };

  std::size_t num_groups() const { return groups_.size(); }
  /// Group i; throws kopt::InvalidArgument when there is none.
  Group group(std::size_t i);

  /// Replaces the grad of `name`; a null Tensor skips the param in the next steps.
  void set_grad(const std::string& name, const Tensor& grad);
  /// Points `name` at new memory holding the same values (a framework swapped its tensors):
  /// same numel and dtype, served by the same engine. Its state is kept, and so is its
  /// shape: a tensor given none (no Tensor::matrix) keeps the registered rows x cols;
  /// another shape is refused.
  /// kopt keeps the raw pointers it was given and cannot see a reallocation: memory replaced
  /// without rebind (set_grad for a grad alone) is still read and written by every step, a
  /// use-after-free once the framework frees it. Call it each time the framework reallocates
  /// (model moved between devices, tensors resized or re-created, a mixed-precision wrapper
  /// swapping tensors).
  void rebind(const std::string& name, const Tensor& param, const Tensor& grad);
  /// Call after writing model weights into the params of an optimizer that has stepped:
  /// the next step takes each fp32 master element (every memory space, offloaded ones too)
  /// from its param unless the master already rounds to it, so the exact masters of a load()
  /// survive their own weights. Until that step the params may still change. Lazy: copies
  /// nothing itself.
  void reload_model_params();

  /// Writes everything a bit-exact resume needs (group configs, per-param step counts,
  /// moments, amsgrad max, fp32 masters of 16-bit params, loss-scaler state) into the
  /// directory `path` (created if missing), keyed by param name and global offset. Atomic:
  /// a crash leaves the previous checkpoint there loadable. Sharded: collective, each rank
  /// writes its own data file and rank 0 the index. Throws kopt::CheckpointError.
  void save(const std::string& path);
  /// Reads a checkpoint written by save(), at any world size and from any placement or
  /// grouping, checking everything (format, checksums, names, sizes, dtypes, configs)
  /// before changing anything: on any mismatch it throws kopt::CheckpointError naming the
  /// file, the param and what differs, and the optimizer is as before. Group configs are
  /// taken from the file. Params are not touched: load the model weights separately, before
  /// or after this call (the next step reconciles each master with its param as after
  /// reload_model_params(); the file's masters are kept where the weights match them).
  void load(const std::string& path, const LoadOptions& options = {});

  /// The scale the training code multiplies its loss by (1 without loss scaling).
  double loss_scale() const;
  /// Completed updates of `name`.
  std::int64_t step_count(const std::string& name) const;
  /// Optimizer state bytes (moments, amsgrad max, fp32 masters; this rank's when sharded)
  /// per execution space name whose memory holds them ("OpenMP" for host memory, "Cuda",
  /// ...): offloaded state counts as host memory. The offload pipeline's staging buffers
  /// are not state.
  std::map<std::string, std::size_t> state_bytes() const;
  /// Bytes the optimizer keeps allocated besides its state, per execution space name as
  /// state_bytes(): its tables and partial sums, the per-tensor workspaces (Muon's
  /// directions, 4 bytes per element, and Newton-Schulz scratch for its largest matrix;
  /// Adafactor's row and column factors), LAMB's block sums on devices (1 byte per
  /// element), the offload pipeline's staging buffers (host: staging_buffers x
  /// chunk_elements x 8 bytes per offload engine, one per param dtype, algorithm and state
  /// storage among the offloaded groups). Sized by the first step (prepare_step) and by
  /// steps that need more; never shrunk. With state_bytes(), what a training code budgets
  /// for the optimizer.
  std::map<std::string, std::size_t> workspace_bytes() const;
  /// Whether the state of `name` lives in host memory and is updated by the offload
  /// pipeline (its group is StatePlacement::host, or OffloadOptions selected it).
  bool is_offloaded(const std::string& name) const { return find_(name).offloaded; }
  /// Number of engines in the plan (one per execution space, param dtype, offload or not,
  /// algorithm and form of state storage).
  std::size_t num_engines() const { return engines_.size(); }

 private:
  friend void Impl::agree_on_arguments(HybridOptimizer&, const std::string&, std::exception_ptr);
  struct Placement {
    std::size_t engine;  ///< none when sharding left this rank no piece of the param
    std::size_t group;
    bool offloaded;
    std::size_t ordinal;  ///< registration order, across groups
  };
  const Placement& find_(const std::string& name) const;
  /// The constructor's work; sharded, every rank runs it and then agrees on its outcome.
  void build_();
  /// step()'s checks and allocations before its first collective.
  void prepare_step_();
  /// Sharded, more than one rank: the communicator; else null.
  Communicator* peers_() const;
  /// A line per param whose grad is null (they must be the same on every rank).
  std::string null_grad_lines_() const;
  /// Throws kopt::InvalidArgument naming `call` in a moved-from optimizer.
  void check_alive_(const char* call) const;
  /// The same, and kopt::InconsistentState after a step that failed part-way.
  void check_consistent_(const char* call) const;
  /// Throws kopt::InvalidArgument naming `call`, the group and the field when a group's
  /// config (mutable between steps) is invalid: step() and save() check them first.
  void check_configs_(const char* call) const;
  StepStats skip_(StepStats stats);  ///< a step skipped whole (non-finite grads)
  /// load()'s second half, before the states: puts checked configs, step counts and the
  /// arrays each group holds in place.
  void apply_loaded_(const std::vector<AlgorithmConfig>& configs,
                     const std::vector<bool>& config_found, const std::vector<std::int64_t>& steps,
                     const std::vector<unsigned>& arrays);
  Communicator& world_();  ///< the sharding communicator, or a world of one

  std::vector<ParamGroup> groups_;
  HybridOptions options_;
  std::optional<LossScaler> scaler_;
  std::vector<std::unique_ptr<Impl::Engine>> engines_;
  std::vector<std::vector<std::size_t>> engine_group_;  ///< [engine][group] -> engine's group
  std::map<std::string, Placement> where_;              ///< by name, never by pointer
  /// [engine][i]: registration ordinal of the engine's i-th param (names the grad norm's
  /// fragments of cut blocks the same way on every rank).
  std::vector<std::vector<std::size_t>> engine_params_;
  /// Sharded only: per ordinal, where its per-param sums (LAMB's norms) sit in the array
  /// every rank gathers (kNone: its algorithm has none), and that array's length.
  std::vector<std::size_t> sum_offset_;
  std::size_t num_sums_ = 0;
  /// step()'s per-param sums over every rank (sharded LAMB; empty otherwise), and its
  /// updates with them.
  std::vector<Impl::ExactSum> join_param_sums_(double grad_scale);
  void step_engines_(double grad_scale, const std::vector<Impl::ExactSum>& sums);
  /// shards_->set(), keeping null_grads_.
  void set_shard_(std::size_t ordinal, const Tensor& param, const Tensor& grad);
  /// The identity (Impl::Unsharded), or ZeRO pieces with ShardingOptions (Impl::ShardPlan).
  std::unique_ptr<Impl::ShardStrategy> shards_;
  /// Per ordinal: completed updates (the engines count too; a sharded rank may hold no piece).
  std::vector<std::int64_t> steps_;
  /// Params whose grad is null: while there are none, a step counts every param's update
  /// without reading each one's grad (100,000 params' took a tenth of a step over them).
  std::size_t null_grads_ = 0;
  /// Per group: the state arrays (bit k: its algorithm's array k) it has used in a step or
  /// loaded from a checkpoint; save() writes these and those its config uses now.
  std::vector<unsigned> held_arrays_;
  std::string failed_step_;  ///< why the state may be partly updated; empty: it is not
  /// False in a moved-from optimizer, which refuses step(), save() (it would replace a
  /// checkpoint with an empty one), load() and reload_model_params().
  Impl::Alive alive_;
};

}  // namespace kopt
