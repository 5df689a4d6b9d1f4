#pragma once
/// \file
/// An engine's tensor stage, for a policy whose update needs each param whole, as a matrix
/// (Policy::tensor_stage: Muon). The step runs in three parts, all on the engine's chunk
/// tables and kernels:
///   1. variant 0 of the update over every element, with a workspace of fp32 directions in
///      place of the params: it updates the state and writes each element's direction;
///   2. Policy::transform on each param's directions as a rows x cols matrix;
///   3. variant 1 over every element, with the transformed directions in place of the
///      grads: it writes the params (masters, rounding: the usual forms) and no state.
/// Each param's rate (Policy::rate, from its shape) goes to the update kernel as a LAMB rate
/// does. For every other policy an empty class: no cost.

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

template <class ExecSpace, class Policy, bool = has_tensor_stage<Policy>>
class TensorStage {
 public:
  using memory_space = typename ExecSpace::memory_space;
  template <class Slots>
  void plan(const ExecSpace&, const std::string&, const ParamRegistry&,
            const std::vector<std::size_t>&, const Slots&) {}
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
      total += (p.numel + 15) / 16 * 16;  // each direction 64-byte aligned
      work.reserve(label, p.rows, p.cols);
    }
    auto directions = directions_;
    if (directions.extent(0) < static_cast<std::size_t>(total)) {
      allocation_point();
      directions = decltype(directions)(label + "::directions", static_cast<std::size_t>(total));
    }
    allocation_point();
    SlotView first(Kokkos::view_alloc(exec, label + "::direction_slots"), registry.size());
    SlotView second(Kokkos::view_alloc(exec, label + "::apply_slots"), registry.size());
    auto first_host = Kokkos::create_mirror_view(first);
    auto second_host = Kokkos::create_mirror_view(second);
    Kokkos::View<float*, memory_space> rates(label + "::rates",
                                             std::max<std::size_t>(registry.size(), 1));
    auto rates_host = Kokkos::create_mirror_view(rates);
    for (std::size_t i = 0; i < registry.size(); ++i) {
      float* d = directions.data() + offsets[i];
      first_host(i) = slots_host(i);
      first_host(i).param = d;  // an f32 param: no master, no rounding
      first_host(i).master = nullptr;
      first_host(i).remainder = nullptr;
      second_host(i) = slots_host(i);
      second_host(i).grad = d;
      second_host(i).grad_dtype = DType::f32;
    }
    Kokkos::deep_copy(exec, first, first_host);
    Kokkos::deep_copy(exec, second, second_host);
    fence(exec, label + "::tensor_stage");  // the host mirrors die here
    directions_ = directions, work_ = work, first_ = first, second_ = second;
    rates_ = rates, rates_host_ = rates_host, offsets_.swap(offsets);
  }

  /// The step: `launch(pass, slots)` runs variant `pass` of the update over every kernel
  /// class with those slots (the engine's launch: pass 0 with f32 params, pass 1 with f32
  /// grads); between them, each updated entry's transform and rate. Blocks while the
  /// transforms run.
  template <class Launch>
  void run(const ExecSpace& exec, const ParamRegistry& registry,
           const std::vector<std::size_t>& updated, const typename SlotView::HostMirror& slots_host,
           const typename Kokkos::View<Scalars*, memory_space>::HostMirror& scalars_host,
           Launch&& launch) {
    launch(0, first_);
    fence(exec, "kopt::TensorStage::directions");
    for (const std::size_t i : updated) {
      const Tensor& p = registry[i].param;
      const Scalars& s = scalars_host(slots_host(i).scalar_set);
      Policy::template transform<ExecSpace>(directions_.data() + offsets_[i], p.rows, p.cols, s,
                                            work_);
      rates_host_(i) = Policy::rate(s, p.rows, p.cols);
    }
    Kokkos::deep_copy(exec, rates_, rates_host_);
    launch(1, second_);
  }

  Kokkos::View<const float*, memory_space> rates() const { return rates_; }

 private:
  Kokkos::View<float*, memory_space> directions_;
  std::vector<std::int64_t> offsets_;
  typename Policy::template Work<ExecSpace> work_;
  SlotView first_, second_;
  Kokkos::View<float*, memory_space> rates_;
  typename Kokkos::View<float*, memory_space>::HostMirror rates_host_;
};

}  // namespace kopt::Impl
