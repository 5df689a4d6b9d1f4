#pragma once
/// \file
/// Member definitions of kopt::FusedAdam. Included by the per-backend instantiation files in
/// backends/ (and by code that instantiates the engine for another execution space); users
/// of the instantiated spaces only need <kopt/fused_adam.hpp>.

#include <algorithm>
#include <cassert>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/fused_adam.hpp>
#include <kopt/grad_norm.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <utility>

namespace kopt {

namespace Impl {

/// The memory spaces execution space `ExecSpace` can read and write.
template <class ExecSpace>
SpaceMask reachable_spaces() {
  SpaceMask mask = 0;
  if (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible)
    mask |= mask_of(MemorySpace::host);
#ifdef KOKKOS_ENABLE_CUDA
  if (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::CudaSpace>::accessible)
    mask |= mask_of(MemorySpace::cuda);
  if (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::CudaUVMSpace>::accessible)
    mask |= mask_of(MemorySpace::cuda_uvm);
  if (Kokkos::SpaceAccessibility<ExecSpace, Kokkos::CudaHostPinnedSpace>::accessible)
    mask |= mask_of(MemorySpace::cuda_host_pinned);
#endif
  return mask;
}

}  // namespace Impl

template <class ExecSpace>
FusedAdam<ExecSpace>::FusedAdam(const ExecSpace& exec, const AdamConfig& config, std::string label)
    : exec_(exec),
      label_(std::move(label)),
      registry_(Impl::reachable_spaces<ExecSpace>(), label_) {
  registry_.add_group(config);
}

template <class ExecSpace>
std::size_t FusedAdam<ExecSpace>::add_group(const AdamConfig& config) {
  return registry_.add_group(config);
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::add(const std::string& name, const Tensor& param, const Tensor& grad,
                               std::size_t group) {
  registry_.add(name, param, grad, group);
}

template <class ExecSpace>
typename FusedAdam<ExecSpace>::FloatView FusedAdam<ExecSpace>::grow_(const FloatView& old,
                                                                     std::int64_t n,
                                                                     const char* what) {
  if (static_cast<std::int64_t>(old.extent(0)) == n) return old;
  Impl::allocation_point();
  // Zero-filled on our instance: fresh moments start at 0.
  FloatView grown(Kokkos::view_alloc(exec_, label_ + "::" + what), n);
  if (old.extent(0) > 0)
    Kokkos::deep_copy(exec_, Kokkos::subview(grown, std::make_pair(std::size_t{0}, old.extent(0))),
                      old);
  return grown;
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::ensure_state_() {
  // Exception-safe by construction: each array is replaced only by a complete, larger copy,
  // and the masters of new params count as initialized only once widened. A failure
  // (allocation, launch) leaves every value as it was, and the next call finishes the work.
  Impl::require_kokkos(label_.c_str());
  const auto [moments, masters] = registry_.lay_out();
  bool need_max = false;
  for (std::size_t g = 0; g < registry_.num_groups(); ++g) need_max |= registry_.config(g).amsgrad;
  const auto sized = [&](const FloatView& v, std::int64_t n) {
    return static_cast<std::int64_t>(v.extent(0)) == n;
  };
  const bool max_ok =
      sized(max_exp_avg_sq_, moments) || (!need_max && max_exp_avg_sq_.extent(0) == 0);
  if (sized(exp_avg_, moments) && sized(exp_avg_sq_, moments) && max_ok &&
      sized(master_, masters) && slots_.extent(0) == registry_.size() &&
      widened_ == registry_.size())
    return;
  exp_avg_ = grow_(exp_avg_, moments, "exp_avg");
  exp_avg_sq_ = grow_(exp_avg_sq_, moments, "exp_avg_sq");
  if (need_max || max_exp_avg_sq_.extent(0) > 0)
    max_exp_avg_sq_ = grow_(max_exp_avg_sq_, moments, "max_exp_avg_sq");
  master_ = grow_(master_, masters, "master");
  if (slots_.extent(0) != registry_.size()) {
    Impl::allocation_point();
    decltype(slots_) slots(Kokkos::view_alloc(exec_, label_ + "::slots"), registry_.size());
    slots_host_ = Kokkos::create_mirror_view(slots);
    slots_ = slots;
  }
  signature_.clear();  // arrays moved: rebuild the chunk tables
  fill_slots_(1.0, false);
  widen_masters_(widened_);
  widened_ = registry_.size();
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::fill_slots_(double grad_scale, bool with_scalars) {
  // Params that share a group and a step count share their scalars: compute each once.
  std::size_t last_group = SIZE_MAX;
  std::int64_t last_step = -1;
  AdamStepScalars scalars{};
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    const Impl::ParamEntry& e = registry_[i];
    Impl::AdamSlot& slot = slots_host_(i);
    slot.param = e.param.data;
    slot.grad = e.grad.data;
    slot.grad_dtype = e.grad.dtype;
    slot.master = e.master_offset >= 0 ? master_.data() + e.master_offset : nullptr;
    slot.exp_avg = exp_avg_.data() + e.state_offset;
    slot.exp_avg_sq = exp_avg_sq_.data() + e.state_offset;
    slot.max_exp_avg_sq =
        max_exp_avg_sq_.extent(0) > 0 ? max_exp_avg_sq_.data() + e.state_offset : nullptr;
    if (with_scalars && e.grad.data != nullptr) {
      if (e.group != last_group || e.step != last_step) {
        scalars = AdamStepScalars::make(registry_.config(e.group), e.step + 1, grad_scale);
        last_group = e.group;
        last_step = e.step;
      }
      slot.scalars = scalars;
    }
  }
  Kokkos::deep_copy(exec_, slots_, slots_host_);  // a no-op where the mirror is the view
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::widen_masters_(std::size_t first) {
  for (const DType dtype : {DType::bf16, DType::f16}) {
    std::vector<Impl::Chunk> chunks;
    for (std::size_t i = first; i < registry_.size(); ++i)
      if (registry_[i].param.dtype == dtype)
        Impl::append_chunks(chunks, i, registry_[i].param.numel, Impl::chunk_size<ExecSpace>);
    if (chunks.empty()) continue;
    const auto table = Impl::upload_chunks(exec_, label_ + "::master_chunks", chunks);
    Impl::visit_update_dtype(dtype, [&](auto param_type) {
      using ParamT = decltype(param_type);
      Impl::launch_chunks(exec_, label_ + "::widen_to_master",
                          static_cast<std::int64_t>(chunks.size()),
                          Impl::WidenToMasterFunctor<ExecSpace, ParamT>{slots_, table});
    });
  }
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::build_classes_(const std::vector<int>& signature,
                                          const std::vector<ClassKey>& keys) {
  // Built aside and swapped in: a failed upload leaves the old plan, which the signature
  // still describes.
  std::vector<KernelClass> classes(keys.size());
  std::vector<std::vector<Impl::Chunk>> lists(keys.size());
  for (std::size_t i = 0; i < signature.size(); ++i)
    if (signature[i] > 0)
      Impl::append_chunks(lists[signature[i] - 1], i, registry_[i].param.numel,
                          Impl::chunk_size<ExecSpace>);
  std::vector<Impl::Chunk> all;
  for (std::size_t c = 0; c < keys.size(); ++c) {
    classes[c].key = keys[c];
    classes[c].chunks = Impl::upload_chunks(exec_, label_ + "::chunks", lists[c]);
    all.insert(all.end(), lists[c].begin(), lists[c].end());
  }
  norms_.set_chunks(exec_, label_, all);  // the last step that may fail: all or nothing
  classes_.swap(classes);
  signature_ = signature;
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::prepare_step() {
  ensure_state_();
  // Which kernel class each param falls in this step (0: no grad, skipped).
  std::vector<int>& signature = next_signature_;  // members: no host allocation per step
  std::vector<ClassKey>& keys = next_keys_;
  signature.assign(registry_.size(), 0);
  keys.clear();
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    const Impl::ParamEntry& e = registry_[i];
    if (e.grad.data == nullptr) continue;
    const ClassKey key{e.param.dtype, e.grad.dtype, registry_.config(e.group).amsgrad};
    const auto it = std::find(keys.begin(), keys.end(), key);
    signature[i] = static_cast<int>(it - keys.begin()) + 1;
    if (it == keys.end()) keys.push_back(key);
  }
  const bool same_keys =
      keys.size() == classes_.size() &&
      std::equal(keys.begin(), keys.end(), classes_.begin(),
                 [](const ClassKey& k, const KernelClass& c) { return k == c.key; });
  if (!same_keys || signature != signature_) build_classes_(signature, keys);
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::grad_sums_of_squares(std::vector<double>& per_param) {
  registry_.validate_configs();
  prepare_step();
  fill_slots_(1.0, false);  // grad pointers and dtypes of this step
  per_param.resize(registry_.size());
  norms_.sums(exec_, label_ + "::grad_sum_of_squares", slots_, per_param);
}

template <class ExecSpace>
double FusedAdam<ExecSpace>::grad_sum_of_squares() {
  grad_sums_of_squares(norm_scratch_);
  double sum = 0.0;
  for (const double s : norm_scratch_) sum += s;
  return sum;
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::step(double grad_scale) {
  KOPT_THROW_IF(!std::isfinite(grad_scale),
                label_ << ": step(grad_scale = " << grad_scale << "): grad_scale must be finite");
  registry_.validate_configs();
  prepare_step();
  fill_slots_(grad_scale, true);
  for (const KernelClass& kc : classes_)
    Impl::launch_update(exec_, label_ + "::update", kc.key.param, kc.key.grad, kc.key.amsgrad,
                        slots_, kc.chunks);
  for (std::size_t i = 0; i < registry_.size(); ++i)
    if (signature_[i] > 0) ++registry_[i].step;
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::reload_model_params() {
  ensure_state_();
  fill_slots_(1.0, false);  // the kernel reads the params through the slots: make them current
  widen_masters_(0);
}

template <class ExecSpace>
AdamStateView<typename FusedAdam<ExecSpace>::memory_space> FusedAdam<ExecSpace>::state(
    const std::string& name) {
  const std::size_t i = registry_.index_of(name);
  ensure_state_();
  const Impl::ParamEntry& e = registry_[i];
  const auto range = [](std::int64_t off, std::int64_t n) {
    return std::make_pair(static_cast<std::size_t>(off), static_cast<std::size_t>(off + n));
  };
  AdamStateView<memory_space> s;
  s.exp_avg = Kokkos::subview(exp_avg_, range(e.state_offset, e.param.numel));
  s.exp_avg_sq = Kokkos::subview(exp_avg_sq_, range(e.state_offset, e.param.numel));
  if (max_exp_avg_sq_.extent(0) > 0)
    s.max_exp_avg_sq = Kokkos::subview(max_exp_avg_sq_, range(e.state_offset, e.param.numel));
  if (e.master_offset >= 0)
    s.master = Kokkos::subview(master_, range(e.master_offset, e.param.numel));
  s.step = e.step;
  return s;
}

template <class ExecSpace>
void FusedAdam<ExecSpace>::set_state(const std::string& name, std::int64_t step,
                                     const float* exp_avg, const float* exp_avg_sq,
                                     const float* max_exp_avg_sq, const float* master) {
  const std::size_t i = registry_.index_of(name);
  ensure_state_();
  const Impl::ParamEntry& e = registry_[i];
  const auto n = static_cast<std::size_t>(e.param.numel);
  const auto put = [&](const FloatView& to, std::int64_t offset, const float* from) {
    if (from == nullptr || to.extent(0) == 0) return;
    using Host =
        Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const auto at = static_cast<std::size_t>(offset);
    Kokkos::deep_copy(exec_, Kokkos::subview(to, std::make_pair(at, at + n)), Host(from, n));
  };
  put(exp_avg_, e.state_offset, exp_avg);
  put(exp_avg_sq_, e.state_offset, exp_avg_sq);
  put(max_exp_avg_sq_, e.state_offset, max_exp_avg_sq);
  if (e.master_offset >= 0) put(master_, e.master_offset, master);
  Impl::fence(exec_, label_ + "::set_state");  // the host arrays may die right after
  registry_[i].step = step;
}

template <class ExecSpace>
std::size_t FusedAdam<ExecSpace>::state_bytes() const {
  return sizeof(float) *
         (exp_avg_.span() + exp_avg_sq_.span() + max_exp_avg_sq_.span() + master_.span());
}

}  // namespace kopt
