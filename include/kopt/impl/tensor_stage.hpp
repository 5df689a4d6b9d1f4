#pragma once
/// \file
/// An engine's tensor stage, for a policy whose update needs each param whole
/// (Policy::tensor_stage: Muon, Adafactor), on the engine's chunk tables and kernels. Two
/// forms:
/// - with directions (Muon): variant 0 of the update writes each element's fp32 direction
///   to a workspace in place of the params (it updates the state); Policy::transform takes
///   each param's directions whole (a rows x cols matrix) and returns the param's rate;
///   variant 1 applies them, the directions in place of the grads, writing the params
///   (masters, rounding: the usual forms) and no state;
/// - reading the grads (Policy::stage_reads_grads, Adafactor): Policy::transform reads each
///   param's grad itself (StageGrad) and updates the param's own state (Policy::
///   tensor_state_size floats: Adafactor's factored statistics) and its scratch
///   (Policy::stage_scratch_size floats); variant 0 then applies the update, its slots as
///   Policy::apply_slot sets them. No workspace per element, no pass to fill one.
/// The rates go to the update kernel as LAMB's do. For every other policy an empty class:
/// no cost.

#include <kopt/compat.hpp>
#include <kopt/error.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/param_registry.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <string>
#include <vector>

namespace kopt::Impl {

template <class Policy>
inline constexpr bool has_tensor_stage = requires {
  Policy::tensor_stage;
};
template <class Policy>
inline constexpr bool stage_reads_grads = requires {
  Policy::stage_reads_grads;
};

/// A param's value as its update reads it: `master` (fp32) where it has one, else `param`
/// (of `dtype`), joined with `remainder` where that is kept.
struct WorkingParam {
  const void* param = nullptr;
  DType dtype = DType::f32;
  const float* master = nullptr;
  const std::uint16_t* remainder = nullptr;
};

/// What a stage that reads the grads gets of one param: its grad, its value and its scratch.
struct StageGrad {
  const void* data;
  DType dtype;
  float* scratch;  ///< Policy::stage_scratch_size floats
  WorkingParam param;
};

/// A pass of the update kernel the stage asks the engine for.
enum class StagePass {
  directions,              ///< variant 0 over the fp32 workspace as params: the directions
  update,                  ///< variant 0 as it is: a stage that reads the grads itself
  update_from_directions,  ///< variant 1, the fp32 directions in place of the grads
};
/// The policy's kernel variant a pass runs.
constexpr int stage_variant(StagePass pass) {
  return pass == StagePass::update_from_directions ? 1 : 0;
}

/// Floats of per-param state a policy with a tensor stage keeps for `p` (0: none).
template <class Policy>
std::int64_t tensor_state_size(const Tensor& p) {
  if constexpr (requires { Policy::tensor_state_size(p); })
    return Policy::tensor_state_size(p);
  else
    return 0;
}

template <class ExecSpace, class Policy, bool = has_tensor_stage<Policy>>
class TensorStage {
 public:
  using memory_space = typename ExecSpace::memory_space;
  template <class Slots>
  void plan(const ExecSpace&, const std::string&, const ParamRegistry&,
            const std::vector<std::size_t>&, const Slots&) {}
  std::int64_t state_size(std::size_t) const { return 0; }
  std::size_t state_bytes() const { return 0; }
  std::size_t workspace_bytes() const { return 0; }
};

template <class ExecSpace, class Policy>
class TensorStage<ExecSpace, Policy, true> {
 public:
  using memory_space = typename ExecSpace::memory_space;
  using SlotView = Kokkos::View<UpdateSlot*, memory_space>;
  using Scalars = typename Policy::Scalars;

  /// After the engine filled its slots (`slots_host`) for the entries it updates
  /// (`updated`): the workspace and the transform's scratch (reallocated only when they
  /// grow), the two passes' slots and the rates. All or nothing. Runs with the engine's
  /// plan, so a steady-state step allocates nothing.
  void plan(const ExecSpace& exec, const std::string& label, const ParamRegistry& registry,
            const std::vector<std::size_t>& updated,
            const typename SlotView::HostMirror& slots_host) {
    std::vector<std::int64_t> offsets(registry.size(), 0);
    std::int64_t total = 0;
    auto work = work_;
    for (const std::size_t i : updated) {
      const Tensor& p = registry[i].param;
      offsets[i] = total;
      total += (scratch_size(p) + 15) / 16 * 16;  // each param's 64-byte aligned
      work.reserve(label, p);
    }
    grow_states(label, registry);
    auto directions = directions_;
    if (directions.extent(0) < static_cast<std::size_t>(total)) {
      allocation_point();
      directions = decltype(directions)(label + "::stage_scratch", static_cast<std::size_t>(total));
    }
    allocation_point();
    // The direction pass's slots: none where the transforms read the grads themselves.
    SlotView first(Kokkos::view_alloc(exec, label + "::direction_slots"),
                   stage_reads_grads<Policy> ? 0 : registry.size());
    SlotView second(Kokkos::view_alloc(exec, label + "::apply_slots"), registry.size());
    auto first_host = Kokkos::create_mirror_view(first);
    auto second_host = Kokkos::create_mirror_view(second);
    Kokkos::View<float*, memory_space> rates(label + "::rates",
                                             std::max<std::size_t>(registry.size(), 1));
    auto rates_host = Kokkos::create_mirror_view(rates);
    for (std::size_t i = 0; i < registry.size(); ++i) {
      float* d = directions.data() + offsets[i];
      second_host(i) = slots_host(i);
      if constexpr (stage_reads_grads<Policy>) {
        Policy::apply_slot(second_host(i), registry[i].param, states_[i].data(), d);
      } else {
        first_host(i) = slots_host(i);
        first_host(i).param = d;  // an f32 param: no master, no rounding
        first_host(i).master = nullptr;
        first_host(i).remainder = nullptr;
        second_host(i).grad = d;
        second_host(i).grad_dtype = DType::f32;
      }
    }
    Kokkos::deep_copy(exec, first, first_host);
    Kokkos::deep_copy(exec, second, second_host);
    fence(exec, label + "::tensor_stage");  // the host mirrors die here
    directions_ = directions, work_ = work, first_ = first, second_ = second;
    rates_ = rates, rates_host_ = rates_host, offsets_.swap(offsets);
  }

  /// The state of every registry entry that has none yet, zeros (torch's start). Entries
  /// keep theirs from then on. All or nothing.
  void grow_states(const std::string& label, const ParamRegistry& registry) {
    auto states = states_;
    for (std::size_t i = states.size(); i < registry.size(); ++i) {
      allocation_point();
      states.emplace_back(label + "::tensor_state",
                          static_cast<std::size_t>(tensor_state_size<Policy>(registry[i].param)));
    }
    states_.swap(states);
  }

  /// The step: `launch(pass, slots)` runs a StagePass of the update over every kernel class
  /// with those slots (the engine's launch); each updated entry's transform, given
  /// `rate_of(i)` (its rate from tensor sums, else its scalars'), returns its rate for the
  /// last pass. Blocks while the transforms run.
  template <class Launch, class RateOf>
  void run(const ExecSpace& exec, const ParamRegistry& registry,
           const std::vector<std::size_t>& updated, const typename SlotView::HostMirror& slots_host,
           const typename Kokkos::View<Scalars*, memory_space>::HostMirror& scalars_host,
           Launch&& launch, RateOf&& rate_of) {
    if constexpr (!stage_reads_grads<Policy>) launch(StagePass::directions, first_);
    fence(exec, "kopt::TensorStage::transform");
    for (const std::size_t i : updated) {
      const UpdateSlot& slot = slots_host(i);
      const Scalars& s = scalars_host(slot.scalar_set);
      float* scratch = directions_.data() + offsets_[i];
      if constexpr (stage_reads_grads<Policy>)
        rates_host_(i) = Policy::template transform<ExecSpace>(
            StageGrad{
                slot.grad, slot.grad_dtype, scratch,
                WorkingParam{slot.param, registry[i].param.dtype, slot.master, slot.remainder}},
            registry[i].param, s, rate_of(i), work_, states_[i].data());
      else
        rates_host_(i) = Policy::template transform<ExecSpace>(
            scratch, registry[i].param, s, rate_of(i), work_, states_[i].data());
    }
    Kokkos::deep_copy(exec, rates_, rates_host_);
    if constexpr (stage_reads_grads<Policy>)
      launch(StagePass::update, second_);
    else
      launch(StagePass::update_from_directions, second_);
  }

  /// Floats of scratch param `p` takes: its directions, or what the policy asks for.
  static std::int64_t scratch_size(const Tensor& p) {
    if constexpr (stage_reads_grads<Policy>)
      return Policy::stage_scratch_size(p);
    else
      return p.numel;
  }

  /// Floats of entry i's per-param state (0 before the plan that first sees it).
  std::int64_t state_size(std::size_t i) const {
    return i < states_.size() ? static_cast<std::int64_t>(states_[i].extent(0)) : 0;
  }
  /// Bytes of per-param state held.
  std::size_t state_bytes() const {
    std::size_t n = 0;
    for (const auto& s : states_) n += s.extent(0) * sizeof(float);
    return n;
  }
  /// Bytes of everything else it keeps in memory_space: the workspace (Muon's directions,
  /// Adafactor's factors), the policy's scratch (Newton-Schulz products, partial sums), the
  /// passes' slots and the rates.
  std::size_t workspace_bytes() const {
    return view_bytes(directions_, first_, second_, rates_) + work_.bytes();
  }
  /// Entry i's per-param state, copied to or from `host` (state_size(i) floats). Blocks.
  void read_state(const ExecSpace& exec, std::size_t i, float* host) const {
    copy_(exec, i, host, true);
  }
  void write_state(const ExecSpace& exec, std::size_t i, const float* host) {
    copy_(exec, i, const_cast<float*>(host), false);
  }

  Kokkos::View<const float*, memory_space> rates() const { return rates_; }

 private:
  void copy_(const ExecSpace& exec, std::size_t i, float* host, bool out) const {
    const auto& state = states_.at(i);
    Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> h(
        host, state.extent(0));
    if (out)
      Kokkos::deep_copy(exec, h, state);
    else
      Kokkos::deep_copy(exec, state, h);
    fence(exec, "kopt::TensorStage::state");
  }

  Kokkos::View<float*, memory_space> directions_;
  std::vector<std::int64_t> offsets_;
  std::vector<Kokkos::View<float*, memory_space>> states_;  ///< per registry entry
  typename Policy::template Work<ExecSpace> work_;
  SlotView first_, second_;
  Kokkos::View<float*, memory_space> rates_;
  typename Kokkos::View<float*, memory_space>::HostMirror rates_host_;
};

}  // namespace kopt::Impl
