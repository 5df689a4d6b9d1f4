#pragma once
/// \file
/// Member definitions of kopt::FusedOptimizer, continued (kopt/impl/fused_optimizer_def.hpp
/// includes this file): what reads and writes a param's state from outside a step, for
/// checkpoints, the sharded and offloaded paths and tests. state() widens 16- and 8-bit arrays
/// into fp32 copies; read_state / write_state / commit_state move spans of it; tensor_state
/// covers per-param state (Adafactor's factored statistics); state_bytes() counts
/// the bytes really held.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <kopt/error.hpp>
#include <kopt/fused_optimizer.hpp>
#include <kopt/impl/fault_injection.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kopt {

template <class ExecSpace, class Policy>
typename FusedOptimizer<ExecSpace, Policy>::State FusedOptimizer<ExecSpace, Policy>::state(
    const std::string& name) {
  check_alive_("state");
  const std::size_t i = registry_.index_of(name);
  ensure_state_();
  const Impl::ParamEntry& e = registry_[i];
  const auto range = [](std::int64_t off, std::int64_t n) {
    return std::make_pair(static_cast<std::size_t>(off), static_cast<std::size_t>(off + n));
  };
  State s;
  // A 16- or 8-bit array: the engine's own, and a copy widened by `fill(out)`, a functor over
  // the param's elements.
  const auto widened = [&](const auto& fill) {
    Impl::allocation_point();
    FloatView wide(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "::widened_state"),
                   static_cast<std::size_t>(e.param.numel));
    Kokkos::parallel_for(
        label_ + "::widened_state",
        Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(exec_, 0, e.param.numel),
        fill(wide.data()));
    return wide;
  };
  const auto widen = [](const auto& narrow) {
    using T = typename std::decay_t<decltype(narrow)>::non_const_value_type;
    return [p = narrow.data()](float* out) { return Impl::WidenSpanFunctor<T>{p, out}; };
  };
  // k != num_arrays, not <: nvcc warns that k < 0 is pointless for Adafactor (no arrays).
  for (std::size_t k = 0; k != Policy::num_arrays; ++k) {
    if (!state_.held(k)) continue;
    const auto at = range(e.state_offset, e.param.numel);
    if (state_.dtype(k) == DType::bf16) {
      s.bf16_arrays[k] = Kokkos::subview(state_.bf16_array(k), at);
      s.arrays[k] = widened(widen(s.bf16_arrays[k]));
    } else if (state_.dtype(k) == DType::f16) {
      s.f16_arrays[k] = Kokkos::subview(state_.f16_array(k), at);
      s.arrays[k] = widened(widen(s.f16_arrays[k]));
    } else if (state_.dtype(k) == DType::q8) {
      const std::int64_t first = e.state_offset / Impl::q8_block * Impl::q8_block_bytes;
      s.q8_arrays[k] =
          Kokkos::subview(state_.q8_array(k), range(first, Impl::q8_bytes(e.param.numel)));
      s.arrays[k] = widened([&](float* out) {
        return Impl::DecodeSpanFunctor{s.q8_arrays[k].data(), out, state_.root(k)};
      });
    } else {
      s.arrays[k] = Kokkos::subview(state_.array(k), at);
    }
  }
  if (e.master_offset >= 0) {
    if (registry_.sync_master(i) || !state_.master_copies())
      s.master = synced_master_(i);
    else
      s.master = Kokkos::subview(state_.master(), range(e.master_offset, e.param.numel));
    if (state_.remainders())
      s.remainder = Kokkos::subview(state_.remainder(), range(e.master_offset, e.param.numel));
  }
  s.step = registry_.step(i);
  return s;
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::read_state(const std::string& name, std::int64_t offset,
                                                   std::int64_t count,
                                                   const Impl::StateArrays<float>& out) {
  check_alive_("read_state");
  const std::size_t i = state_.span(registry_, name, offset, count, "read_state");
  ensure_state_();
  state_.read(exec_, registry_, i, offset, count, out);
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::write_state(const std::string& name, std::int64_t offset,
                                                    std::int64_t count,
                                                    const Impl::StateArrays<const float>& in) {
  check_alive_("write_state");
  const std::size_t i = state_.span(registry_, name, offset, count, "write_state");
  ensure_state_();
  state_.write(exec_, registry_, i, offset, count, in);
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::commit_state(const std::string& name, std::int64_t step) {
  check_alive_("commit_state");
  state_.commit(registry_, name, step);
  planned_.clear();  // its scalar row and sync table change
}

template <class ExecSpace, class Policy>
std::vector<float> FusedOptimizer<ExecSpace, Policy>::tensor_state(const std::string& name) {
  check_alive_("tensor_state");
  const std::size_t i = registry_.index_of(name);
  std::vector<float> out;
  if constexpr (Impl::has_tensor_stage<Policy>) {
    stage_.grow_states(label_, registry_);
    out.resize(static_cast<std::size_t>(stage_.state_size(i)));
    stage_.read_state(exec_, i, out.data());
  }
  return out;
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::set_tensor_state(const std::string& name,
                                                         const std::vector<float>& values) {
  check_alive_("set_tensor_state");
  const std::size_t i = registry_.index_of(name);
  std::int64_t size = 0;
  if constexpr (Impl::has_tensor_stage<Policy>) {
    stage_.grow_states(label_, registry_);
    size = stage_.state_size(i);
  }
  KOPT_THROW_IF(static_cast<std::int64_t>(values.size()) != size,
                label_ << ": set_tensor_state('" << name << "'): " << values.size()
                       << " floats for a per-param state of " << size);
  if constexpr (Impl::has_tensor_stage<Policy>) stage_.write_state(exec_, i, values.data());
}

template <class ExecSpace, class Policy>
void FusedOptimizer<ExecSpace, Policy>::keep_state_arrays(unsigned arrays) {
  check_alive_("keep_state_arrays");
  KOPT_THROW_IF((arrays >> Policy::num_arrays) != 0,
                label_ << ": keep_state_arrays(" << arrays << "): " << Policy::name << " has "
                       << Policy::num_arrays << " state arrays");
  registry_.hold_arrays(arrays);
}

template <class ExecSpace, class Policy>
std::size_t FusedOptimizer<ExecSpace, Policy>::state_bytes() const {
  // Moved from: its views may still share the arrays of the engine it moved to (a Kokkos
  // View's move may be a copy), which counts them.
  if (!alive_.yes) return 0;
  return state_.bytes() + stage_.state_bytes();
}

template <class ExecSpace, class Policy>
std::size_t FusedOptimizer<ExecSpace, Policy>::workspace_bytes() const {
  if (!alive_.yes) return 0;
  std::size_t bytes = Impl::view_bytes(slots_, scalars_, row_steps_) + norms_.workspace_bytes() +
                      rates_.workspace_bytes() + stage_.workspace_bytes();
  for (const KernelClass& c : classes_)  // runs are the chunks themselves where none join
    bytes += Impl::view_bytes(c.chunks) +
             (c.runs.data() == c.chunks.data() ? 0 : Impl::view_bytes(c.runs));
  for (const SyncTable& t : sync_tables_) bytes += Impl::view_bytes(t.chunks);
  return bytes;
}

}  // namespace kopt
