#pragma once
/// \file
/// kopt::FusedAdam: the fused engine (kopt::FusedOptimizer) running Adam/AdamW, with its
/// state under Adam's names. It keeps the moments, the amsgrad max and the fp32 masters of
/// 16-bit params in the execution space's memory and updates every parameter in one launch
/// per (param dtype, grad dtype, amsgrad) class present, normally one.

#include <kopt/fused_optimizer.hpp>
#include <kopt/impl/backends.hpp>

namespace kopt {

/// Read-only handles on one parameter's Adam state, in the engine's memory space.
template <class MemSpace>
struct AdamStateView {
  Kokkos::View<const float*, MemSpace> exp_avg;
  Kokkos::View<const float*, MemSpace> exp_avg_sq;
  Kokkos::View<const float*, MemSpace> max_exp_avg_sq;  ///< empty unless amsgrad ran
  Kokkos::View<const float*, MemSpace> master;          ///< empty for fp32 params
  std::int64_t step = 0;                                ///< completed updates
};

template <class ExecSpace>
class FusedAdam : public FusedOptimizer<ExecSpace, Impl::AdamPolicy> {
  using Base = FusedOptimizer<ExecSpace, Impl::AdamPolicy>;

 public:
  using typename Base::memory_space;

  /// An engine with one group (index 0) of `config`; validates it. Allocates nothing.
  /// `storage`: how the state is stored (kopt::StateStorage: masters, state array dtype).
  explicit FusedAdam(const ExecSpace& exec, const AdamConfig& config = AdamConfig{},
                     std::string label = "kopt::FusedAdam", const StateStorage& storage = {})
      : Base(exec, config, std::move(label), storage) {}

  /// The state of `name` (see FusedOptimizer::state).
  AdamStateView<memory_space> state(const std::string& name) {
    auto s = Base::state(name);
    return {s.arrays[0], s.arrays[1], s.arrays[2], s.master, s.step};
  }
  /// Overwrites the state of `name` from host arrays of numel floats (a checkpoint): the
  /// moments, the amsgrad max (ignored when null or when no group uses amsgrad), the fp32
  /// master (16-bit params only; ignored for f32 ones) and the step count. Blocks. Like
  /// reload_model_params(), the master is reconciled with the param at its next update: the
  /// param's weights may be written before or after this call.
  void set_state(const std::string& name, std::int64_t step, const float* exp_avg,
                 const float* exp_avg_sq, const float* max_exp_avg_sq, const float* master) {
    KOPT_THROW_IF(step < 0 || step > max_step_count,
                  Base::label() << ": set_state('" << name << "'): step count " << step
                                << " is outside [0, kopt::max_step_count]");
    Base::write_state(name, 0, Base::numel(name), {exp_avg, exp_avg_sq, max_exp_avg_sq, master});
    Base::commit_state(name, step);
  }
  using Base::read_state;
  using Base::write_state;
  /// Elements [offset, offset + count) of the state of `name` into host arrays (see
  /// FusedOptimizer::read_state; a null array is not read).
  void read_state(const std::string& name, std::int64_t offset, std::int64_t count, float* exp_avg,
                  float* exp_avg_sq, float* max_exp_avg_sq, float* master) {
    Base::read_state(name, offset, count, {exp_avg, exp_avg_sq, max_exp_avg_sq, master});
  }
  /// Overwrites elements [offset, offset + count) of the state of `name` (see
  /// FusedOptimizer::write_state; a null array is left as it is).
  void write_state(const std::string& name, std::int64_t offset, std::int64_t count,
                   const float* exp_avg, const float* exp_avg_sq, const float* max_exp_avg_sq,
                   const float* master) {
    Base::write_state(name, offset, count, {exp_avg, exp_avg_sq, max_exp_avg_sq, master});
  }
};

}  // namespace kopt
