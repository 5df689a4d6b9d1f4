#pragma once
/// \file
/// Member definitions of the offload engine that build its plan: the pipeline chunks and
/// their segments, the host slots, the rows of step scalars, the runs and the copies a step
/// makes; included by kopt/impl/offload_engine_def.hpp (the step itself).

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <kopt/error.hpp>
#include <kopt/impl/chunk_runs.hpp>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/impl/offload_engine.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

namespace offload_detail {
/// Staging bytes per element of a chunk, in each of the grad and param buffers: the widest
/// dtype's. Segments are packed at their dtype's alignment, and a 16-bit segment leaves at
/// least 2 bytes of its budget unused, more than any padding after it.
constexpr std::int64_t stride = 4;
inline std::int64_t aligned(std::int64_t at, std::size_t size) {
  const auto a = static_cast<std::int64_t>(size);
  return (at + a - 1) / a * a;
}
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace offload_detail

template <class DeviceExec, class StateMem, class Policy>
unsigned char* OffloadEngine<DeviceExec, StateMem, Policy>::grad_stage_(std::size_t batch) const {
  const auto per_buffer = options_.chunk_elements * 2 * offload_detail::stride;
  return staging_.data() + (batch % options_.staging_buffers) * per_buffer;
}

template <class DeviceExec, class StateMem, class Policy>
unsigned char* OffloadEngine<DeviceExec, StateMem, Policy>::param_stage_(std::size_t batch) const {
  return grad_stage_(batch) + options_.chunk_elements * offload_detail::stride;
}

template <class DeviceExec, class StateMem, class Policy>
const void* OffloadEngine<DeviceExec, StateMem, Policy>::host_param_(std::size_t batch,
                                                                     const Segment& s) const {
  const ParamEntry& e = registry_[s.entry];
  if (e.param.dtype == DType::f32) return state_.master().data() + e.state_offset + s.begin;
  return param_stage_(batch) + s.param_at;
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::build_batches_(
    const std::vector<std::size_t>& entries, bool with_kernels) {
  segments_.clear();
  batches_.clear();
  ranges_.clear();
  host_chunks_.clear();
  const std::int64_t chunk = options_.chunk_elements;
  std::int64_t fill = 0, grad_fill = 0, param_fill = 0;  // elements; staging bytes
  const auto close_batch = [&] {
    Batch b{batches_.empty() ? 0 : batches_.back().seg_last, segments_.size(), ranges_.size(), 0};
    if (with_kernels)
      for (std::size_t k = 0; k < keys_.size(); ++k) {
        const std::size_t first = host_chunks_.size();
        for (std::size_t i = b.seg_first; i < b.seg_last; ++i)
          if (signature_[segments_[i].entry] == static_cast<int>(k) + 1)
            append_chunks(host_chunks_, i, segments_[i].len, chunk_size<HostExec>);
        if (host_chunks_.size() > first)
          ranges_.push_back(ClassRange{keys_[k], first, host_chunks_.size(), 0, 0});
      }
    b.range_last = ranges_.size();
    batches_.push_back(b);
    fill = grad_fill = param_fill = 0;
  };
  for (const std::size_t e : entries)
    for (std::int64_t off = 0, numel = registry_[e].param.numel; off < numel;) {
      std::int64_t take = std::min(numel - off, chunk - fill);
      // q8 blocks are updated whole: a param's pieces start on blocks (chunk is a multiple of
      // one, so a batch without room for one more block has room left only after a param's end).
      if (state_.any_q8() && off + take < numel) take -= take % q8_block;
      if (take == 0) {
        close_batch();
        continue;
      }
      const ParamEntry& entry = registry_[e];
      const std::size_t grad_size = size_of(entry.grad.dtype);
      const std::size_t param_size =
          entry.param.dtype == DType::f32 ? 0 : size_of(entry.param.dtype);
      const std::int64_t grad_at = offload_detail::aligned(grad_fill, grad_size);
      const std::int64_t param_at =
          param_size == 0 ? 0 : offload_detail::aligned(param_fill, param_size);
      segments_.push_back(Segment{e, off, take, grad_at, param_at});
      grad_fill = grad_at + take * static_cast<std::int64_t>(grad_size);
      if (param_size != 0) param_fill = param_at + take * static_cast<std::int64_t>(param_size);
      assert(grad_fill <= chunk * offload_detail::stride &&
             param_fill <= chunk * offload_detail::stride);
      off += take;
      fill += take;
      if (fill == chunk) close_batch();
    }
  if (fill > 0) close_batch();
  grads_landed_.assign(batches_.size(), 0);
  params_sent_.assign(batches_.size(), 0);
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::plan_() {
  ensure_state_();
  const auto check_steps = [&](std::size_t i) {
    KOPT_THROW_IF(registry_.step(i) >= max_step_count,
                  label_ << ": step(): '" << registry_[i].name << "' has completed "
                         << registry_.step(i)
                         << " steps, the most kopt counts (kopt::max_step_count)");
  };
  // The same params with grads, in the same classes: only the step counts are checked, a
  // row's at a time (its params share theirs).
  if (!signature_.empty() && planned_.current(registry_)) {
    if (rows_stale_) assign_rows_();
    for (const Row& row : rows_) check_steps(row.entry);
    return;
  }
  std::vector<int>& signature = next_signature_;
  std::vector<ClassKey> keys;
  // Refused here, before any engine of an optimizer launches anything: no step overflows.
  classify_entries<Policy>(registry_, signature, keys, check_steps);
  // Built again even for the same signature: a rebound param or grad has other pointers.
  signature_ = signature;
  keys_ = keys;
  try {
    build_plan_();
  } catch (...) {
    signature_.clear();  // no plan cached: the next call builds it again
    throw;
  }
  planned_.take(registry_);
  assign_rows_();  // if it fails, the next call assigns them (rows_stale_)
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::build_plan_() {
  std::vector<std::size_t> entries;
  std::vector<typename GradNorms<DeviceExec>::Piece> norm_pieces;
  for (std::size_t i = 0; i < registry_.size(); ++i)
    if (signature_[i] > 0) {
      entries.push_back(i);
      norm_pieces.push_back(norm_piece<DeviceExec>(i, registry_[i].param));
    }
  build_batches_(entries, true);
  host_slots_.assign(segments_.size(), UpdateSlot{});
  segment_plans_.resize(segments_.size());
  host_scalars_.reserve(segments_.size());  // step() then allocates nothing
  host_row_steps_.reserve(segments_.size());
  for (std::size_t b = 0; b < batches_.size(); ++b)
    for (std::size_t i = batches_[b].seg_first; i < batches_[b].seg_last; ++i) {
      const Segment& s = segments_[i];
      const ParamEntry& e = registry_[s.entry];
      UpdateSlot& slot = host_slots_[i];
      slot.param = const_cast<void*>(host_param_(b, s));
      slot.grad = grad_stage_(b) + s.grad_at;
      slot.grad_dtype = e.grad.dtype;
      state_.point(slot, e, s.begin);
      const std::size_t grad_size = size_of(e.grad.dtype), param_size = size_of(e.param.dtype);
      segment_plans_[i] =
          SegmentPlan{static_cast<const unsigned char*>(e.grad.data) + s.begin * grad_size,
                      static_cast<unsigned char*>(e.param.data) + s.begin * param_size,
                      static_cast<std::size_t>(s.len) * grad_size,
                      static_cast<std::size_t>(s.len) * param_size,
                      e.group,
                      e.param.dtype};
    }
  rows_stale_ = true;
  if (copy_ops_.extent(0) < 5 * segments_.size()) {
    allocation_point();
    copy_ops_ = decltype(copy_ops_)(label_ + "::copy_ops", 5 * segments_.size());
  }
  plan_copies_();
  norms_.set_pieces(device_, label_, norm_pieces, norm_chunk_size<DeviceExec>);
  if (device_slots_.extent(0) != registry_.size()) {
    allocation_point();
    decltype(device_slots_) slots(label_ + "::device_slots", registry_.size());
    device_slots_host_ = Kokkos::create_mirror_view(slots);
    device_slots_ = slots;
  }
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::assign_rows_() {
  // One row per run of segments that share group and step count: a step then computes its
  // scalars a row at a time, where it went through every segment (100,000 tiny params).
  rows_.clear();
  std::size_t last_group = SIZE_MAX;
  std::int64_t last_step = -1;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const std::size_t group = segment_plans_[i].group;
    const std::int64_t step = registry_.step(segments_[i].entry);
    if (group != last_group || step != last_step) {
      rows_.push_back(Row{group, segments_[i].entry});
      last_group = group;
      last_step = step;
    }
    host_slots_[i].scalar_set = static_cast<std::int32_t>(rows_.size() - 1);
  }
  build_runs_();
  rows_stale_ = false;
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::build_runs_() {
  // Segments staged one after another (params cut from one buffer), with their masters and
  // state one after another too and the same row, update as one span: 100,000 segments of
  // 64 elements were 100,000 chunks.
  run_chunks_.clear();
  for (ClassRange& range : ranges_) {
    range.run_first = run_chunks_.size();
    run_order_.clear();
    for (std::size_t c = range.first; c < range.last; ++c)
      if (run_order_.empty() || run_order_.back() != static_cast<std::size_t>(host_chunks_[c].slot))
        run_order_.push_back(static_cast<std::size_t>(host_chunks_[c].slot));
    SlotDTypes d{range.key.param, range.key.grad, {}};
    for (std::size_t k = 0; k < max_state_arrays; ++k) d.state[k] = state_.dtype(k);
    append_runs(
        run_chunks_, run_order_, [&](std::size_t i) { return segments_[i].len; },
        [&](std::size_t a, std::int64_t n, std::size_t b) {
          if constexpr (reads_param_values<Policy>) return false;
          return slot_continues(host_slots_[a], n, host_slots_[b], d);
        },
        chunk_size<HostExec>);
    range.run_last = run_chunks_.size();
  }
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::plan_copies_() {
  // The same copies every step, joined once here where each step went through every
  // segment. A step that reconciles masters (any_sync_) makes its own (send_grads_).
  lone_ops_.clear();
  in_lists_.assign(batches_.size(), CopyList{});
  out_lists_.assign(batches_.size(), CopyList{});
  const auto lone = [&](const CopyOp& op) { lone_ops_.push_back(op); };
  for (std::size_t b = 0; b < batches_.size(); ++b) {
    const std::size_t first = batches_[b].seg_first, last = batches_[b].seg_last;
    CopyList& in = in_lists_[b];
    in = CopyList{lone_ops_.size(), 0, 2 * first, 0};
    // Remainders, and groups without masters, need their params every step: a param is
    // half its master, or all of it.
    const bool params = !state_.master_copies();
    add_copies_in_(lone, copy_ops_.data() + in.ops_at, in.batched, b,
                   [&](std::size_t) { return params; });
    in.lone_last = lone_ops_.size();
    CopyList& out = out_lists_[b];
    out = CopyList{lone_ops_.size(), 0, 2 * segments_.size() + first, 0};
    for (std::size_t i = first; i < last; ++i)
      add_copy_(lone, copy_ops_.data() + out.ops_at, out.batched, segment_plans_[i].param,
                host_slots_[i].param, segment_plans_[i].param_bytes);
    out.lone_last = lone_ops_.size();
  }
}

template <class DeviceExec, class StateMem, class Policy>
void OffloadEngine<DeviceExec, StateMem, Policy>::send_list_(CopyQueue& queue,
                                                             const CopyList& list) {
  for (std::size_t k = list.lone_first; k < list.lone_last; ++k)
    queue.copy(lone_ops_[k].dst, lone_ops_[k].src, lone_ops_[k].bytes);
  queue.copy_batch(copy_ops_.data() + list.ops_at, list.batched);
}

template <class DeviceExec, class StateMem, class Policy>
template <class Lone>
void OffloadEngine<DeviceExec, StateMem, Policy>::add_copy_(const Lone& lone, CopyOp* ops,
                                                            std::size_t& count, void* dst,
                                                            const void* src,
                                                            std::size_t bytes) const {
  if (bytes >= options_.batch_copies_below) {
    lone(CopyOp{dst, src, bytes});
  } else if (bytes > 0) {
    // A copy that continues the batch's last on both sides joins it, up to the batching
    // limit (a GPU block copies each op): 100,000 tiny params cut from one buffer cost
    // a memcpy of 128 bytes each, 2 x 100,000 a step on the host.
    CopyOp* last = count > 0 ? &ops[count - 1] : nullptr;
    if (last != nullptr && static_cast<unsigned char*>(last->dst) + last->bytes == dst &&
        static_cast<const unsigned char*>(last->src) + last->bytes == src &&
        last->bytes + bytes < options_.batch_copies_below)
      last->bytes += bytes;
    else
      ops[count++] = CopyOp{dst, src, bytes};
  }
}

template <class DeviceExec, class StateMem, class Policy>
template <class Lone, class WithParam>
void OffloadEngine<DeviceExec, StateMem, Policy>::add_copies_in_(
    const Lone& lone, CopyOp* ops, std::size_t& count, std::size_t batch,
    const WithParam& with_param) const {
  const std::size_t first = batches_[batch].seg_first, last = batches_[batch].seg_last;
  for (std::size_t i = first; i < last; ++i)
    add_copy_(lone, ops, count, const_cast<void*>(host_slots_[i].grad), segment_plans_[i].grad,
              segment_plans_[i].grad_bytes);
  for (std::size_t i = first; i < last; ++i)
    if (with_param(i))
      add_copy_(lone, ops, count, host_slots_[i].param, segment_plans_[i].param,
                segment_plans_[i].param_bytes);
}

}  // namespace kopt::Impl
