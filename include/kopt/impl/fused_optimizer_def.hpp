#pragma once
/// \file
/// Member definitions of kopt::FusedOptimizer. Included by the per-backend instantiation files in
/// backends/ (and by code that instantiates the engine for another execution space); users
/// of the instantiated spaces only need <kopt/fused_adam.hpp>.

#include <algorithm>
#include <cassert>
#include <cmath>
#include <kopt/error.hpp>
#include <kopt/fused_optimizer.hpp>
#include <kopt/grad_norm.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/fused_optimizer_state_def.hpp>
#include <kopt/impl/huge_pages.hpp>
#include <kopt/impl/state_arrays.hpp>
#include <map>
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

template <class ExecSpace, class Policy>
FusedOptimizer<ExecSpace, Policy>::FusedOptimizer(const ExecSpace& exec, const Config& config,
                                                  std::string label, const StateStorage& storage)
    : exec_(exec),
      label_(std::move(label)),
      registry_(Impl::reachable_spaces<ExecSpace>(), label_),
      state_(label_, Impl::Masters::of_16_bit_params, storage) {
  registry_.add_group(config);
}

template <class ExecSpace, class Policy>
std::size_t FusedOptimizer<ExecSpace, Policy>::add_group(const Config& config) {
  check_alive_("add_group");
  return registry_.add_group(config);
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::add(const std::string& name, const Tensor& param,
                                            const Tensor& grad, std::size_t group) {
  check_alive_("add");
  state_.check_param(name, param);
  if constexpr (Impl::has_tensor_stage<Policy>) {
    constexpr bool matrices = requires { Policy::Config::whole_matrices; };
    KOPT_THROW_IF((matrices && !param.is_matrix()) || param.is_shard(),
                  label_ << ": parameter '" << name << "' is " << describe(param) << ": "
                         << Policy::name
                         << (matrices ? " updates whole matrices; give the param its 2-D shape "
                                        "(kopt::Tensor::matrix), whole (not a shard), or put it "
                                        "in a group of an elementwise algorithm (AdamW)"
                                      : " updates whole params; give the whole param, not a "
                                        "shard of it"));
  }
  registry_.add(name, param, grad, group);
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::ensure_state_() {
  // New masters start at zero, flagged: their first update takes them from the params
  // (Impl::synced_master), so a param may change until then.
  bool moved = state_.grow(exec_, registry_);
  if (slots_.extent(0) != registry_.size()) {
    Impl::allocation_point();
    decltype(slots_) slots(Kokkos::view_alloc(exec_, label_ + "::slots"), registry_.size());
    slots_host_ = Kokkos::create_mirror_view(slots);
    slots_ = slots;
    moved = true;
  }
  if (!moved) return;
  signature_.clear();  // arrays moved: rebuild the chunk tables and the slots
  planned_.clear();
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::fill_slots_() {
  // Params that share a group and a step count share a row of scalars (usually a group is
  // one row); consecutive params usually share it, so the map is asked only on a change.
  updated_.clear();
  sets_.clear();
  std::map<std::pair<std::size_t, std::int64_t>, std::int32_t> rows;
  std::int32_t row = -1;
  for (std::size_t i = 0; i < registry_.size(); ++i) {
    const Impl::ParamEntry& e = registry_[i];
    Impl::UpdateSlot& slot = slots_host_(i);
    slot.param = e.param.data;
    slot.grad = e.grad.data;
    slot.grad_dtype = e.grad.dtype;
    state_.point(slot, e);
    slot.scalar_set = 0;
    if (signature_[i] == 0) continue;
    updated_.push_back(i);
    const std::int64_t step = registry_.step(i);
    if (row < 0 || sets_[row].group != e.group || sets_[row].step != step) {
      const auto [it, added] =
          rows.try_emplace({e.group, step}, static_cast<std::int32_t>(sets_.size()));
      if (added) sets_.push_back(ScalarSet{e.group, step});
      row = it->second;
    }
    slot.scalar_set = row;
  }
  if (scalars_.extent(0) < std::max<std::size_t>(sets_.size(), 1)) {
    Impl::allocation_point();
    decltype(scalars_) scalars(Kokkos::view_alloc(exec_, label_ + "::step_scalars"),
                               std::max<std::size_t>(sets_.size(), 1));
    scalars_host_ = Kokkos::create_mirror_view(scalars);
    scalars_ = scalars;
  }
  if (state_.storage().keyed() && row_steps_.extent(0) < std::max<std::size_t>(sets_.size(), 1)) {
    Impl::allocation_point();
    decltype(row_steps_) steps(Kokkos::view_alloc(exec_, label_ + "::row_steps"),
                               std::max<std::size_t>(sets_.size(), 1));
    row_steps_host_ = Kokkos::create_mirror_view(steps);
    row_steps_ = steps;
  }
  Kokkos::deep_copy(exec_, slots_, slots_host_);  // a no-op where the mirror is the view
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::build_sync_(const std::vector<std::size_t>& entries) {
  // Built aside and swapped in, like the classes: a failed upload leaves the old tables.
  std::vector<SyncTable> tables;
  for (const DType dtype : {DType::bf16, DType::f16}) {
    std::vector<Impl::Chunk> chunks;
    for (const std::size_t i : entries)
      if (registry_[i].param.dtype == dtype)
        Impl::append_chunks(chunks, i, registry_[i].param.numel, Impl::chunk_size<ExecSpace>);
    if (!chunks.empty())
      tables.push_back(
          SyncTable{dtype, Impl::upload_chunks(exec_, label_ + "::sync_chunks", chunks)});
  }
  sync_tables_.swap(tables);
  sync_entries_ = entries;
}

template <class ExecSpace, class Policy>
typename FusedOptimizer<ExecSpace, Policy>::FloatView
FusedOptimizer<ExecSpace, Policy>::synced_master_(std::size_t i) {
  const Impl::ParamEntry& e = registry_[i];
  // Computed aside: the engine's master stays as it is until the param's next update, so
  // weights written after this call still count.
  Impl::allocation_point();
  FloatView out(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "::synced_master"),
                static_cast<std::size_t>(e.param.numel));
  if (state_.storage().master == MasterStorage::none) {  // the param is all there is
    Impl::visit_update_dtype(e.param.dtype, [&](auto param_type) {
      using ParamT = decltype(param_type);
      if constexpr (!std::is_same_v<ParamT, float>)
        Kokkos::parallel_for(
            label_ + "::widened_param",
            Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec_, 0,
                                                                            e.param.numel),
            Impl::WidenSpanFunctor<ParamT>{static_cast<const ParamT*>(e.param.data), out.data()});
    });
    return out;
  }
  if (state_.remainders()) {  // the param and its remainder, joined
    Kokkos::parallel_for(
        label_ + "::joined_master",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec_, 0, e.param.numel),
        Impl::JoinSpanFunctor{static_cast<const bfloat16*>(e.param.data),
                              state_.remainder().data() + e.master_offset, out.data()});
    const auto& ties = state_.loaded_ties().of(i);
    if (!ties.empty()) Impl::fence(exec_, label_ + "::joined_master");
    for (const auto& t : ties) {  // as the next update will take them (settle_ties)
      bfloat16 p;
      Impl::copy_bytes(&p, MemorySpace::host,
                       static_cast<const bfloat16*>(e.param.data) + t.element, e.param.space,
                       sizeof p);
      if (!Impl::LoadedTies::takes(p, t.master)) continue;
      const auto at = static_cast<std::size_t>(t.element);
      Kokkos::deep_copy(
          exec_, Kokkos::subview(out, std::make_pair(at, at + 1)),
          Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(&t.master, 1));
    }
    return out;
  }
  Impl::visit_update_dtype(e.param.dtype, [&](auto param_type) {
    using ParamT = decltype(param_type);
    if constexpr (!std::is_same_v<ParamT, float>)
      Kokkos::parallel_for(
          label_ + "::synced_master",
          Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec_, 0, e.param.numel),
          Impl::SyncSpanFunctor<ParamT>{static_cast<const ParamT*>(e.param.data),
                                        state_.master().data() + e.master_offset, out.data()});
  });
  return out;
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::build_classes_(const std::vector<int>& signature,
                                                       const std::vector<ClassKey>& keys) {
  // Built aside and swapped in: a failed upload leaves the old plan, which the signature
  // still describes.
  std::vector<KernelClass> classes(keys.size());
  std::vector<std::vector<Impl::Chunk>> lists(keys.size());
  for (std::size_t i = 0; i < signature.size(); ++i)
    if (signature[i] > 0)
      Impl::append_chunks(lists[signature[i] - 1], i, registry_[i].param.numel,
                          Impl::chunk_size<ExecSpace>);
  for (std::size_t c = 0; c < keys.size(); ++c) {
    classes[c].key = keys[c];
    classes[c].chunks = Impl::upload_chunks(exec_, label_ + "::chunks", lists[c]);
  }
  std::vector<typename Impl::GradNorms<ExecSpace>::Piece> pieces;
  for (std::size_t i = 0; i < signature.size(); ++i)
    if (signature[i] > 0) pieces.push_back(Impl::norm_piece<ExecSpace>(i, registry_[i].param));
  rates_.plan(exec_, label_, lists, keys, registry_.size());
  // The last step that may fail: all or nothing.
  norms_.set_pieces(exec_, label_, pieces, Impl::norm_chunk_size<ExecSpace>);
  classes_.swap(classes);
  signature_ = signature;
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::prepare_step() {
  check_alive_("prepare_step");
  ensure_state_();
  if (!planned_.current(registry_)) build_plan_();
  // Refused here, before any engine of an optimizer launches anything: no step overflows.
  for (const ScalarSet& set : sets_)
    KOPT_THROW_IF(set.step >= max_step_count,
                  label_ << ": step(): params of group " << set.group << " have completed "
                         << set.step << " steps, the most kopt counts (kopt::max_step_count)");
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::build_plan_() {
  planned_.clear();  // until every table below is built
  // Which kernel class each param falls in this step (0: no grad, skipped).
  std::vector<int>& signature = next_signature_;  // members: no host allocation per step
  std::vector<ClassKey>& keys = next_keys_;
  Impl::classify_entries<Policy>(registry_, signature, keys);
  const bool same_keys =
      keys.size() == classes_.size() &&
      std::equal(keys.begin(), keys.end(), classes_.begin(),
                 [](const ClassKey& k, const KernelClass& c) { return k == c.key; });
  if (!same_keys || signature != signature_) build_classes_(signature, keys);
  // The masters this step reconciles before updating (flagged, and their params updated).
  std::vector<std::size_t>& sync = next_sync_;
  sync.clear();
  for (std::size_t i = 0; i < registry_.size(); ++i)
    if (signature_[i] > 0 && registry_.sync_master(i) && registry_[i].master_offset >= 0 &&
        state_.master_copies())  // a remainder's param is half of its master: always in sync
      sync.push_back(i);
  if (sync != sync_entries_) build_sync_(sync);
  fill_slots_();
  join_runs_();
  stage_.plan(exec_, label_, registry_, updated_, slots_host_);
  planned_.take(registry_);
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::join_runs_() {
  std::vector<std::size_t> order;
  std::vector<Impl::Chunk> runs;
  for (std::size_t c = 0; c < classes_.size(); ++c) {
    KernelClass& kc = classes_[c];
    kc.runs = kc.chunks;  // valid whatever fails below
    if constexpr (Impl::reads_param_values<Policy>) continue;
    Impl::SlotDTypes d{kc.key.param, kc.key.grad, {}};
    for (std::size_t k = 0; k < max_state_arrays; ++k) d.state[k] = state_.dtype(k);
    order.clear();
    for (std::size_t i = 0; i < signature_.size(); ++i)
      if (signature_[i] == static_cast<int>(c) + 1) order.push_back(i);
    runs.clear();
    Impl::append_runs(
        runs, order, [&](std::size_t i) { return registry_[i].param.numel; },
        [&](std::size_t a, std::int64_t n, std::size_t b) {
          return Impl::slot_continues(slots_host_(a), n, slots_host_(b), d);
        },
        Impl::chunk_size<ExecSpace>);
    if (runs.size() < kc.chunks.extent(0))
      kc.runs = Impl::upload_chunks(exec_, label_ + "::runs", runs);
  }
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::grad_norm_parts(Impl::NormParts& out) {
  check_alive_("grad_norm_parts");
  registry_.validate_configs();
  prepare_step();
  norms_.sums(exec_, label_ + "::grad_sum_of_squares", slots_, out);
}

template <class ExecSpace, class Policy>
double FusedOptimizer<ExecSpace, Policy>::grad_sum_of_squares() {
  check_alive_("grad_sum_of_squares");
  Impl::NormParts parts;
  grad_norm_parts(parts);
  Impl::add_fragment_blocks(parts);  // alone, a cut block's other elements count as zeros
  return parts.sum.value();
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::begin_step_(double grad_scale) {
  check_alive_("step");
  KOPT_THROW_IF(!std::isfinite(grad_scale),
                label_ << ": step(grad_scale = " << grad_scale << "): grad_scale must be finite");
  registry_.validate_configs();
  prepare_step();
  for (std::size_t k = 0; k < sets_.size(); ++k)
    scalars_host_(k) = Policy::scalars(config(sets_[k].group), sets_[k].step + 1, grad_scale);
  Kokkos::deep_copy(exec_, scalars_, scalars_host_);
  if (row_steps_.extent(0) > 0) {
    for (std::size_t k = 0; k < sets_.size(); ++k) row_steps_host_(k) = sets_[k].step + 1;
    Kokkos::deep_copy(exec_, row_steps_, row_steps_host_);
  }
  // Launched here, not in prepare_step(): a step that fails or is skipped before its update
  // leaves the masters as they were, so weights written after it still count. (Run again
  // by a step after measure_param_sums(): the masters then round to their params already,
  // and the sync keeps them.)
  for (const SyncTable& t : sync_tables_)
    Impl::launch_sync(exec_, label_ + "::sync_master", t.dtype, slots_, t.chunks);
  state_.settle_ties(exec_, registry_, [&](std::size_t i) { return signature_[i] > 0; });
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::measure_param_sums(double grad_scale,
                                                           std::vector<Impl::ExactSum>& out) {
  check_alive_("measure_param_sums");
  out.clear();
  if constexpr (Impl::has_tensor_sums<Policy>) {
    begin_step_(grad_scale);
    auto sums = rates_.measure(exec_, label_, state_.storage(), slots_, scalars_, class_chunks_(),
                               registry_.size());
    for (auto& entry : sums)
      for (auto& sum : entry) {
        sum.normalize();
        out.push_back(sum);
      }
  }
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::step(double grad_scale,
                                             const std::vector<Impl::ExactSum>* param_sums) {
  begin_step_(grad_scale);
  if constexpr (Impl::has_tensor_sums<Policy>) {  // each param's rate, from its sums
    constexpr int K = Policy::tensor_sums;
    typename Impl::TensorRates<ExecSpace, Policy>::Sums sums;
    if (param_sums == nullptr) {
      sums = rates_.measure(exec_, label_, state_.storage(), slots_, scalars_, class_chunks_(),
                            registry_.size());
    } else {
      KOPT_THROW_IF(param_sums->size() != registry_.size() * K,
                    label_ << ": step(): " << param_sums->size() << " param sums for "
                           << registry_.size() << " params of " << K << " sums each");
      sums.resize(registry_.size());
      for (std::size_t i = 0; i < registry_.size(); ++i)
        for (int k = 0; k < K; ++k) sums[i][k] = (*param_sums)[i * K + k];
    }
    rates_.set_rates(exec_, sums, slots_host_, scalars_host_, signature_, updated_);
  }
  if constexpr (Impl::has_tensor_stage<Policy>) {
    // The stage's passes (directions in place of the params, then of the grads; or the
    // update alone), each param transformed between them.
    stage_.run(
        exec_, registry_, updated_, slots_host_, scalars_host_,
        [&](Impl::StagePass pass, const auto& slots) {
          const bool directions = pass == Impl::StagePass::directions;
          const bool from_directions = pass == Impl::StagePass::update_from_directions;
          for (const KernelClass& kc : classes_)
            Impl::launch_update<ExecSpace, Policy>(
                exec_, label_ + (directions ? "::directions" : "::update"),
                directions ? DType::f32 : kc.key.param, from_directions ? DType::f32 : kc.key.grad,
                Impl::stage_variant(pass), state_.storage(), slots, scalars_, row_steps_, kc.chunks,
                stage_.rates());
        },
        [&](std::size_t i) {
          if constexpr (Impl::has_tensor_sums<Policy>)
            return rates_.host_rate(i);
          else
            return scalars_host_(slots_host_(i).scalar_set).rate;
        });
  } else {
    for (const KernelClass& kc : classes_)
      Impl::launch_update<ExecSpace, Policy>(exec_, label_ + "::update", kc.key.param, kc.key.grad,
                                             kc.key.variant, state_.storage(), slots_, scalars_,
                                             row_steps_, kc.runs, rates_.rates());
  }
  for (const std::size_t i : updated_) registry_.advance(i);  // the master leads from now on
  for (ScalarSet& set : sets_) ++set.step;  // its params all stepped: still one row
  // Every synced entry was just updated: the next step syncs none of them (the plan stays
  // current: a flagged entry without a grad needs set_grad, a new version, to be updated).
  // Freed now, so that a steady-state step frees (and, in Kokkos 3.4, launches a
  // destructor for) nothing.
  sync_entries_.clear();
  sync_tables_.clear();
}

template <class ExecSpace, class Policy>
std::vector<Kokkos::View<Impl::Chunk*, typename ExecSpace::memory_space>>
FusedOptimizer<ExecSpace, Policy>::class_chunks_() const {
  std::vector<Kokkos::View<Impl::Chunk*, memory_space>> chunks;
  for (const KernelClass& kc : classes_) chunks.push_back(kc.chunks);
  return chunks;
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::reload_model_params() {
  check_alive_("reload_model_params");
  // Lazy: each param's next update reconciles its master with it, keeping a master that
  // already rounds to the param (a checkpoint's exact fp32 value) and taking the param
  // wherever the training code wrote other weights.
  registry_.reload_all();
  planned_.clear();  // the next step builds its sync tables
}

}  // namespace kopt
