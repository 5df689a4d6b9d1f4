#pragma once
/// \file
/// Member definitions of the offload engine: its step (the pipeline) and its state; those
/// that build its plan are in kopt/impl/offload_plan_def.hpp. Included by the files that
/// instantiate it (src/offload_host.cpp, backends/cuda/offload_cuda.cpp).

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/impl/huge_pages.hpp>
#include <kopt/impl/offload_engine.hpp>
#include <kopt/impl/offload_plan_def.hpp>

namespace kopt::Impl {

template <class DeviceExec, class StateMem, class Policy>
OffloadEngine<DeviceExec, StateMem, Policy>::OffloadEngine(const DeviceExec& device,
                                                           std::shared_ptr<CopyQueue> to_host,
                                                           std::shared_ptr<CopyQueue> to_device,
                                                           const OffloadOptions& options,
                                                           std::string label,
                                                           const StateStorage& storage)
    : device_(device),
      to_host_(std::move(to_host)),
      to_device_(std::move(to_device)),
      options_(options),
      label_(std::move(label)),
      registry_(reachable_spaces<DeviceExec>(), label_),
      state_(label_, Masters::of_every_param, storage) {
  options_.validate();
  KOPT_THROW_IF(state_.any_q8() && options_.chunk_elements % q8_block != 0,
                label_ << ": OffloadOptions.chunk_elements = " << options_.chunk_elements
                       << ": q8 state is updated in whole blocks of " << q8_block
                       << " elements; use a multiple of " << q8_block);
}

template <class DeviceExec, class StateMem, class Policy>
OffloadEngine<DeviceExec, StateMem, Policy>::~OffloadEngine() {
  drain_queues_();  // no copy may outlive the buffers it reads or writes
}

template <class DeviceExec, class StateMem, class Policy>
std::size_t OffloadEngine<DeviceExec, StateMem, Policy>::add_group(const AlgorithmConfig& config) {
  return registry_.add_group(config_of<Policy>(config, label_));
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::add(const std::string& name, const Tensor& param,
                                                      const Tensor& grad, std::size_t group) {
  state_.check_param(name, param);
  registry_.add(name, param, grad, group);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::drain_queues_() noexcept {
  try {
    to_host_->drain();
  } catch (...) {
  }
  try {
    to_device_->drain();
  } catch (...) {
  }
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::ensure_state_() {
  // New params' masters are taken from the params by their first update
  // (ParamRegistry::sync_master).
  bool moved = state_.grow(host_, registry_);
  if (staging_.extent(0) == 0) {
    allocation_point();
    staging_ = decltype(staging_)(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "::staging"),
        static_cast<std::size_t>(options_.staging_buffers * options_.chunk_elements * 2 *
                                 offload_detail::stride));
    moved = true;
  }
  if (!moved) return;
  Impl::fence(host_, label_ + "::state");
  signature_.clear();  // buffers moved: rebuild the plan
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::grad_norm_parts(NormParts& out) {
  registry_.validate_configs();
  plan_();
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    device_slots_host_(i).grad = registry_[i].grad.data;
    device_slots_host_(i).grad_dtype = registry_[i].grad.dtype;
  }
  Kokkos::deep_copy(device_, device_slots_, device_slots_host_);
  norms_.sums(device_, label_ + "::grad_sum_of_squares", device_slots_, out);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::send_grads_(std::size_t batch) {
  // This batch's staging buffer was last used by batch - staging_buffers: its params must
  // be on their way out before new grads land on them.
  const auto depth = static_cast<std::size_t>(options_.staging_buffers);
  if (batch >= depth) {
    const auto t0 = std::chrono::steady_clock::now();
    to_device_->wait(params_sent_[batch - depth]);
    times_.wait_staging += offload_detail::seconds_since(t0);
  }
  if (mode_ != PipelineMode::update_only && !(any_sync_ && state_.master_copies())) {
    send_list_(*to_host_, in_lists_[batch]);  // planned (plan_copies_)
  } else if (mode_ != PipelineMode::update_only) {
    // Beside the planned ops (copy_ops_), which the next steps use again.
    CopyOp* ops = copy_ops_.data() + 3 * segments_.size() + 2 * batches_[batch].seg_first;
    std::size_t count = 0;
    const auto lone = [&](const CopyOp& op) { to_host_->copy(op.dst, op.src, op.bytes); };
    // A master to reconcile: the param comes along, into its f32 master (which simply
    // becomes the param) or the param staging that update_() reconciles the master with.
    add_copies_in_(lone, ops, count, batch,
                   [&](std::size_t i) { return registry_.sync_master(segments_[i].entry); });
    to_host_->copy_batch(ops, count);
  }
  grads_landed_[batch] = to_host_->mark();
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::update_(std::size_t batch) {
  if (mode_ == PipelineMode::copies_only) return;
  const auto t0 = std::chrono::steady_clock::now();
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  const Kokkos::View<const UpdateSlot*, Kokkos::HostSpace, Unmanaged> slots(host_slots_.data(),
                                                                            host_slots_.size());
  const Kokkos::View<const Scalars*, Kokkos::HostSpace, Unmanaged> scalars(host_scalars_.data(),
                                                                           host_scalars_.size());
  const Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Unmanaged> steps(
      host_row_steps_.data(), host_row_steps_.size());
  sync_masters_(batch, slots);
  for (std::size_t r = batches_[batch].range_first; r < batches_[batch].range_last; ++r) {
    const ClassRange& range = ranges_[r];
    const Kokkos::View<const Chunk*, Kokkos::HostSpace, Unmanaged> chunks(
        run_chunks_.data() + range.run_first, range.run_last - range.run_first);
    launch_update<HostExec, Policy>(host_, label_ + "::update", range.key.param, range.key.grad,
                                    range.key.variant, state_.storage(), slots, scalars, steps,
                                    chunks);
  }
  Impl::fence(host_, label_ + "::update");
  times_.update += offload_detail::seconds_since(t0);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::send_params_(std::size_t batch) {
  if (mode_ != PipelineMode::update_only) send_list_(*to_device_, out_lists_[batch]);
  params_sent_[batch] = to_device_->mark();
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::step(double grad_scale) {
  KOPT_THROW_IF(!std::isfinite(grad_scale),
                label_ << ": step(grad_scale = " << grad_scale << "): grad_scale must be finite");
  registry_.validate_configs();
  plan_();
  // This step's scalars, a row at a time (assign_rows_).
  host_scalars_.clear();
  host_row_steps_.clear();
  for (const Row& row : rows_) {
    const std::int64_t step = registry_.step(row.entry);
    host_scalars_.push_back(
        Policy::scalars(std::get<Config>(registry_.config(row.group)), step + 1, grad_scale));
    host_row_steps_.push_back(step + 1);  // stochastic rounding's bits are keyed by it
  }
  // Masters to reconcile this step (new params, weights reloaded, a checkpoint loaded).
  bool any_sync = false;
  for (std::size_t i = 0; i < signature_.size(); ++i)
    any_sync |= signature_[i] > 0 && registry_.sync_master(i);
  any_sync_ = any_sync;
  const auto t0 = std::chrono::steady_clock::now();
  times_ = PipelineTimes{};
  // The grads were written by work on the device's own instance: let it finish first.
  Impl::fence(device_, label_ + "::grads_ready");
  // Remainders loaded from fp32 masters with odd ties: their params take the high halves
  // now, before they are copied out (LoadedTies).
  state_.settle_ties(host_, registry_, [&](std::size_t i) { return signature_[i] > 0; });
  try {
    const std::size_t n = batches_.size();
    if (n > 0) send_grads_(0);
    for (std::size_t b = 0; b < n; ++b) {
      if (b + 1 < n) send_grads_(b + 1);  // lands while this batch computes
      const auto t_wait = std::chrono::steady_clock::now();
      to_host_->wait(grads_landed_[b]);  // exactly this batch's grads
      times_.wait_grads += offload_detail::seconds_since(t_wait);
      update_(b);
      send_params_(b);
    }
    const auto t_last = std::chrono::steady_clock::now();
    to_device_->drain();  // the next forward must never read a half-copied param
    times_.wait_last = offload_detail::seconds_since(t_last);
  } catch (...) {
    drain_queues_();
    throw;
  }
  times_.total = offload_detail::seconds_since(t0);
  for (std::size_t i = 0; i < registry_.size(); ++i)
    if (signature_[i] > 0) registry_.advance(i);  // the master leads from now on
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::sync_masters_(
    std::size_t batch, const Kokkos::View<const UpdateSlot*, Kokkos::HostSpace,
                                          Kokkos::MemoryTraits<Kokkos::Unmanaged>>& slots) {
  // The flagged segments' params landed in staging with their grads (send_grads_); an f32
  // param landed in its master, which simply becomes it. One launch per 16-bit dtype for
  // the whole batch (a launch per segment costs a fork and join each: 100,000 tiny params
  // took seconds). Remainders and groups without masters have nothing to reconcile.
  if (!state_.master_copies() || !any_sync_) return;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    sync_chunks_.clear();
    for (std::size_t i = batches_[batch].seg_first; i < batches_[batch].seg_last; ++i)
      if (registry_.sync_master(segments_[i].entry) && segment_plans_[i].param_dtype == dtype)
        append_chunks(sync_chunks_, i, segments_[i].len, chunk_size<HostExec>);
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    launch_sync(host_, label_ + "::sync_master", dtype, slots,
                Kokkos::View<const Chunk*, Kokkos::HostSpace, Unmanaged>(sync_chunks_.data(),
                                                                         sync_chunks_.size()));
  }
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::reload_model_params() {
  // Lazy, as FusedOptimizer's: each param's next update reconciles its master with it.
  registry_.reload_all();
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::read_state(const std::string& name,
                                                             const StateSpan<float>& out) {
  const std::size_t i = span_of_(name, out.offset, out.count, "read_state");
  state_.read(host_, registry_, i, out.offset, out.count, out.arrays);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::write_state(const std::string& name,
                                                              const StateSpan<const float>& in) {
  const std::size_t i = span_of_(name, in.offset, in.count, "write_state");
  state_.write(host_, registry_, i, in.offset, in.count, in.arrays);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::commit_state(const std::string& name,
                                                               std::int64_t step) {
  state_.commit(registry_, name, step);
  rows_stale_ = true;  // its row may change
}

template <class DeviceExec, class StateMem, class Policy>
std::size_t OffloadEngine<DeviceExec, StateMem, Policy>::state_bytes() const {
  return state_.bytes();
}

}  // namespace kopt::Impl
