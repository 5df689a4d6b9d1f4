#pragma once
/// \file
/// The offload engine (ZeRO-Offload): params and grads stay where the training code keeps
/// them (device memory); the algorithm's state arrays and the masters live in host memory
/// (`StateMem`: pinned where the backend has it). Masters are fp32 copies of every param
/// (MasterStorage::f32), or remainders of bf16 params (2 B instead of 4 on the host; the
/// param, the master's other half, then comes to the host with its grad every step: 2 B
/// more per element copied), or none (the param itself, which comes along the same way).
/// Each step runs a pipeline of fixed-size chunks: grads device->host on one copy queue, the
/// host update of a chunk as soon as exactly that chunk's copies landed, the updated params
/// host->device on a second queue (on a GPU its second copy engine; host-only builds share
/// one worker), the next chunk's grads landing while this one computes. The host update is
/// kopt's fused kernel (launch_update) on the host execution space: the same code, so
/// offloaded params get bitwise the same values as params updated by a host engine.

#include <kopt/impl/copy_queue.hpp>
#include <kopt/impl/engine.hpp>
#include <kopt/impl/engine_state.hpp>
#include <kopt/impl/policies.hpp>
#include <kopt/offload_options.hpp>
#include <vector>

namespace kopt::Impl {

/// Wall-clock seconds of the last offloaded step, for the benchmark.
struct PipelineTimes {
  double update = 0;        ///< in host update kernels
  double wait_grads = 0;    ///< waiting for a chunk's grads to land
  double wait_staging = 0;  ///< waiting for a staging buffer's params to leave
  double wait_last = 0;     ///< after the last update, until every param is back
  double total = 0;         ///< the whole step
};

/// What a step runs; anything but `full` is for measuring the phases apart (it leaves the
/// params and state meaningless).
enum class PipelineMode { full, update_only, copies_only };

template <class DeviceExec, class StateMem, class Policy>
class OffloadEngine final : public Engine {
 public:
  using HostExec = Kokkos::DefaultHostExecutionSpace;
  using Config = typename Policy::Config;
  using Scalars = typename Policy::Scalars;

  /// `storage`: any master form (fp32 masters kept on the host for every param; remainders
  /// and none take 16-bit params only), state arrays of any dtype.
  OffloadEngine(const DeviceExec& device, std::shared_ptr<CopyQueue> to_host,
                std::shared_ptr<CopyQueue> to_device, const OffloadOptions& options,
                std::string label, const StateStorage& storage = {});
  ~OffloadEngine() override;

  std::size_t add_group(const AlgorithmConfig& config) override;
  void set_config(std::size_t group, const AlgorithmConfig& config) override {
    std::get<Config>(registry_.config(group)) = config_of<Policy>(config, label_);
  }
  const char* algorithm() const override { return Policy::name; }
  void add(const std::string& name, const Tensor& param, const Tensor& grad,
           std::size_t group) override;
  void set_grad(const std::string& name, const Tensor& grad) override {
    registry_.set_grad(name, grad);
  }
  void rebind(const std::string& name, const Tensor& param, const Tensor& grad) override {
    registry_.rebind(name, param, grad);
  }
  void grad_norm_parts(NormParts& out) override;
  void prepare_step() override { plan_(); }
  void step(double grad_scale) override;
  void reload_model_params() override;
  void fence() override {}  // step() and reload_model_params() return with all copies done
  std::int64_t step_count(const std::string& name) const override {
    return registry_.step(registry_.index_of(name));
  }
  std::size_t state_bytes() const override;
  /// The staging buffers and copy lists (host), the grad norm's tables (device).
  void add_workspace_bytes(std::map<std::string, std::size_t>& bytes) const override {
    bytes[HostExec::name()] += view_bytes(staging_, copy_ops_);
    bytes[DeviceExec::name()] += view_bytes(device_slots_) + norms_.workspace_bytes();
  }
  void keep_state_arrays(unsigned arrays) override { registry_.hold_arrays(arrays); }
  unsigned held_state_arrays() const override { return state_.held(); }
  void read_state(const std::string& name, const StateSpan<float>& out) override;
  void write_state(const std::string& name, const StateSpan<const float>& in) override;
  void commit_state(const std::string& name, std::int64_t step) override;
  const char* space_name() const override { return DeviceExec::name(); }
  const char* state_space_name() const override { return HostExec::name(); }

  void set_mode(PipelineMode mode) { mode_ = mode; }
  const PipelineTimes& last_times() const { return times_; }

 private:
  using DevMem = typename DeviceExec::memory_space;
  /// Elements [begin, begin + len) of registry entry `entry`, its grads staged at byte
  /// `grad_at` of its chunk's grad staging and (a 16-bit param) its params at `param_at` of
  /// the param staging: packed, each at its dtype's alignment, so that the segments of params
  /// laid out one after the other (tiny params cut from one buffer) are staged one after the
  /// other too, and their copies join into one (plan_copies_).
  struct Segment {
    std::size_t entry;
    std::int64_t begin, len, grad_at, param_at;
  };
  /// What a step reads of a segment's entry, taken when the plan is built: a step over
  /// 100,000 tiny params read each entry (a name, two tensors) in four loops, a cache miss
  /// each time (a third of the step's time beside one param's). Its host side is its slot's
  /// (host_slots_: grad staging, and the master or param staging).
  struct SegmentPlan {
    const unsigned char* grad;  ///< its grads where they live
    unsigned char* param;       ///< its params where they live
    std::size_t grad_bytes, param_bytes, group;
    DType param_dtype;
  };
  /// One kernel class's host chunks within a pipeline chunk: host_chunks_[first, last), a
  /// chunk per segment; and the same segments as runs, run_chunks_[run_first, run_last).
  struct ClassRange {
    ClassKey key;
    std::size_t first = 0, last = 0, run_first = 0, run_last = 0;
  };
  /// A pipeline chunk: segments_[seg_first, seg_last), ranges_[range_first, range_last).
  struct Batch {
    std::size_t seg_first, seg_last, range_first, range_last;
  };

  void ensure_state_();
  /// Checks [offset, offset + count) against the param, allocates the state; its index.
  std::size_t span_of_(const std::string& name, std::int64_t offset, std::int64_t count,
                       const char* call) {
    const std::size_t i = state_.span(registry_, name, offset, count, call);
    ensure_state_();
    return i;
  }
  void plan_();
  void build_plan_();  ///< batches, slots and norm chunks for signature_
  void build_batches_(const std::vector<std::size_t>& entries, bool with_kernels);
  /// Each segment's row of step scalars (rows_), then each range's segments as runs
  /// (kopt/impl/chunk_runs.hpp), which need the rows.
  void assign_rows_();
  void build_runs_();
  /// The copies of every pipeline chunk that every step makes (in_lists_, out_lists_).
  void plan_copies_();
  unsigned char* grad_stage_(std::size_t batch) const;
  unsigned char* param_stage_(std::size_t batch) const;
  /// Where entry e's updated param values sit on the host: its master for f32, else staging.
  const void* host_param_(std::size_t batch, const Segment& s) const;
  void send_grads_(std::size_t batch);
  void update_(std::size_t batch);
  void send_params_(std::size_t batch);
  /// Adds a copy: `lone(op)` when large, else appended to ops[count++] (or joined to the last).
  template <class Lone>
  void add_copy_(const Lone& lone, CopyOp* ops, std::size_t& count, void* dst, const void* src,
                 std::size_t bytes) const;
  /// Adds pipeline chunk `batch`'s copies towards the host: every segment's grad, then the
  /// params of the segments `with_param(i)` picks (after the grads, so adjacent copies join).
  template <class Lone, class WithParam>
  void add_copies_in_(const Lone& lone, CopyOp* ops, std::size_t& count, std::size_t batch,
                      const WithParam& with_param) const;
  /// A pipeline chunk's copies in one direction, planned: lone_ops_[lone_first, lone_last)
  /// each enqueued on its own, then copy_ops_[ops_at, ops_at + batched) as one batch.
  struct CopyList {
    std::size_t lone_first = 0, lone_last = 0, ops_at = 0, batched = 0;
  };
  void send_list_(CopyQueue& queue, const CopyList& list);
  /// Reconciles the masters of the batch's flagged params with the params send_grads_ staged.
  void sync_masters_(std::size_t batch,
                     const Kokkos::View<const UpdateSlot*, Kokkos::HostSpace,
                                        Kokkos::MemoryTraits<Kokkos::Unmanaged>>& slots);
  void drain_queues_() noexcept;

  DeviceExec device_;
  HostExec host_;
  std::shared_ptr<CopyQueue> to_host_, to_device_;
  OffloadOptions options_;
  std::string label_;
  ParamRegistry registry_;
  /// The policy's arrays, and a master of every param (an f32 param's: its host copy).
  EngineState<StateMem, Policy> state_;
  Kokkos::View<unsigned char*, StateMem> staging_;  ///< per buffer: grads, then params
  /// The batched copies of small segments (OffloadOptions::batch_copies_below), where the
  /// device reads them, a batch's at its first segment's slots: those planned towards the
  /// host (two per segment: grad, param), then towards the device (one per segment), then
  /// two per segment for a step that reconciles masters (send_grads_).
  Kokkos::View<CopyOp*, StateMem> copy_ops_;

  // The step's plan: rebuilt when which params have grads (or their kernel class) changes.
  std::vector<int> signature_, next_signature_;
  std::vector<ClassKey> keys_;
  std::vector<Segment> segments_;
  std::vector<SegmentPlan> segment_plans_;  ///< per segment
  PlanStamp<Policy> planned_;               ///< what the plan was built for
  std::vector<Batch> batches_;
  std::vector<ClassRange> ranges_;
  std::vector<Chunk> host_chunks_;      ///< slot = segment index
  std::vector<Chunk> run_chunks_;       ///< the same, segments joined into runs
  std::vector<std::size_t> run_order_;  ///< build_runs_'s scratch
  /// A row of step scalars: segments of one group and one step count (`entry`'s). Every
  /// param a plan updates steps with every step, so rows hold until the plan changes or a
  /// checkpoint loads step counts (rows_stale_).
  struct Row {
    std::size_t group, entry;
  };
  std::vector<Row> rows_;
  bool rows_stale_ = true;
  /// Per pipeline chunk, the copies towards the host (grads, and every param where there are
  /// no fp32 masters) and towards the device (params), planned with the plan.
  std::vector<CopyList> in_lists_, out_lists_;
  std::vector<CopyOp> lone_ops_;
  bool any_sync_ = false;               ///< this step reconciles masters: their params come too
  std::vector<Chunk> sync_chunks_;      ///< a batch's masters to reconcile (sync_masters_)
  std::vector<UpdateSlot> host_slots_;  ///< per segment, pointing into staging and state
  std::vector<Scalars> host_scalars_;   ///< this step's, rows named by host_slots_
  std::vector<std::int64_t> host_row_steps_;  ///< each row's step (1-based)
  std::vector<CopyQueue::Ticket> grads_landed_, params_sent_;

  // The grad norm, computed where the grads are before the pipeline starts.
  Kokkos::View<UpdateSlot*, DevMem> device_slots_;
  typename Kokkos::View<UpdateSlot*, DevMem>::HostMirror device_slots_host_;
  GradNorms<DeviceExec> norms_;

  PipelineMode mode_ = PipelineMode::full;
  PipelineTimes times_;
};

}  // namespace kopt::Impl
