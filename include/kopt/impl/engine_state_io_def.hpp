#pragma once
/// \file
/// EngineState's read and write (kopt/impl/engine_state.hpp): a span of one param's state
/// copied to host arrays in fp32 and back, whatever each array's dtype, and its master as
/// the next update would start from it. Included by engine_state.hpp alone.

#include <kopt/impl/q8_span.hpp>

namespace kopt::Impl {

template <class MemSpace, class Policy>
template <class Exec>
void EngineState<MemSpace, Policy>::read(const Exec& exec, const ParamRegistry& registry,
                                         std::size_t i, std::int64_t offset, std::int64_t count,
                                         const StateArrays<float>& out) const {
  fence(exec, label_ + "::read_state");  // updates enqueued before
  const ParamEntry& e = registry[i];
  const auto n = static_cast<std::size_t>(count);
  const auto get = [&](const FloatView& from, std::int64_t at, float* to) {
    if (to == nullptr || n == 0) return;
    if (from.extent(0) == 0) {  // an array no group uses yet: the zeros it starts from
      std::fill(to, to + n, 0.0f);
      return;
    }
    const auto first = static_cast<std::size_t>(at + offset);
    Kokkos::deep_copy(HostFloats(to, n), Kokkos::subview(from, std::make_pair(first, first + n)));
  };
  // A 16-bit array's elements, widened (zeros while it is not allocated).
  const auto get_narrow = [&](const auto& from, float* to) {
    using T = typename std::decay_t<decltype(from)>::non_const_value_type;
    if (to == nullptr || n == 0) return;
    std::vector<T> narrow(n);
    if (from.extent(0) > 0) {
      const auto first = static_cast<std::size_t>(e.state_offset + offset);
      Kokkos::deep_copy(HostView<T>(narrow.data(), n),
                        Kokkos::subview(from, std::make_pair(first, first + n)));
    }
    for (std::size_t j = 0; j < n; ++j) to[j] = to_float(narrow[j]);
  };
  for (std::size_t k = 0; k < arrays_.size(); ++k) {
    if (dtype(k) == DType::bf16)
      get_narrow(bf16_[k], out[k]);
    else if (dtype(k) == DType::f16)
      get_narrow(f16_[k], out[k]);
    else if (dtype(k) == DType::q8 && out[k] != nullptr && n > 0)
      Q8Span<Q8View>(q8_[k], e.state_offset, offset, count, root(k)).download().decode(out[k]);
    else
      get(arrays_[k], e.state_offset, out[k]);
  }
  float* const master = out[kMaster];
  if (master == nullptr || n == 0 || e.param.dtype == DType::f32) return;
  const std::int64_t m = master_at(e);
  const bool none = storage_.master == MasterStorage::none;
  if (m < 0 && !none) return;
  if (master_copies()) get(master_, m, master);
  if (!registry.sync_master(i) && master_copies()) return;
  // What the next update would start from, computed on a host copy of the param: the
  // engine's own master changes only then, so weights written after this still count.
  const std::size_t width = size_of(e.param.dtype);
  std::vector<unsigned char> param(n * width);
  copy_bytes(param.data(), MemorySpace::host,
             static_cast<const unsigned char*>(e.param.data) + offset * width, e.param.space,
             param.size());
  if (remainders()) {  // the param and its remainder, joined
    std::vector<std::uint16_t> low(n);
    const auto first = static_cast<std::size_t>(m + offset);
    Kokkos::deep_copy(HostRemainders(low.data(), n),
                      Kokkos::subview(remainder_, std::make_pair(first, first + n)));
    const auto* high = reinterpret_cast<const bfloat16*>(param.data());
    for (std::size_t k = 0; k < n; ++k) master[k] = join_master(high[k], low[k]);
    for (const LoadedTies::Tie& t : ties_.of(i))  // as settle_ties() will take them
      if (t.element >= offset && t.element - offset < count &&
          LoadedTies::takes(high[t.element - offset], t.master))
        master[t.element - offset] = t.master;
    return;
  }
  visit_update_dtype(e.param.dtype, [&](auto param_type) {
    using ParamT = decltype(param_type);
    if constexpr (!std::is_same_v<ParamT, float>) {
      const auto* p = reinterpret_cast<const ParamT*>(param.data());
      const SyncSpanFunctor<ParamT> sync{p, master, master};
      const WidenSpanFunctor<ParamT> widen{p, master};  // none: the param is the master
      for (std::size_t k = 0; k < n; ++k)
        none ? widen(static_cast<std::int64_t>(k)) : sync(static_cast<std::int64_t>(k));
    }
  });
}

template <class MemSpace, class Policy>
template <class Exec>
void EngineState<MemSpace, Policy>::write(const Exec& exec, const ParamRegistry& registry,
                                          std::size_t i, std::int64_t offset, std::int64_t count,
                                          const StateArrays<const float>& in) {
  const ParamEntry& e = registry[i];
  const auto n = static_cast<std::size_t>(count);
  const auto put = [&](const FloatView& to, std::int64_t at, const float* from) {
    if (from == nullptr || to.extent(0) == 0 || n == 0) return;
    const auto first = static_cast<std::size_t>(at + offset);
    Kokkos::deep_copy(exec, Kokkos::subview(to, std::make_pair(first, first + n)),
                      ConstHostFloats(from, n));
  };
  // A 16-bit array's elements, rounded to nearest even.
  const auto put_narrow = [&](const auto& to, const float* from) {
    using T = typename std::decay_t<decltype(to)>::non_const_value_type;
    if (from == nullptr || to.extent(0) == 0 || n == 0) return;
    std::vector<T> narrow(n);
    for (std::size_t j = 0; j < n; ++j) narrow[j] = from_float<T>(from[j]);
    const auto first = static_cast<std::size_t>(e.state_offset + offset);
    Kokkos::deep_copy(exec, Kokkos::subview(to, std::make_pair(first, first + n)),
                      HostView<const T>(narrow.data(), n));
    fence(exec, label_ + "::write_state");  // `narrow` dies here
  };
  for (std::size_t k = 0; k < arrays_.size(); ++k) {
    if (dtype(k) == DType::bf16)
      put_narrow(bf16_[k], in[k]);
    else if (dtype(k) == DType::f16)
      put_narrow(f16_[k], in[k]);
    else if (dtype(k) == DType::q8 && in[k] != nullptr && q8_[k].extent(0) > 0 && n > 0)
      Q8Span<Q8View>(q8_[k], e.state_offset, offset, count, root(k))
          .download()
          .encode(in[k], e.param.numel)
          .upload(exec);
    else
      put(arrays_[k], e.state_offset, in[k]);
  }
  const std::int64_t m = master_at(e);
  if (m >= 0 && !remainders()) put(master_, m, in[kMaster]);
  if (m >= 0 && remainders() && in[kMaster] != nullptr && n > 0) {
    // Only the master's remainder is kept: the param holds the rest once the weights saved
    // with it are loaded, before or after this (other weights move the master with them).
    // Weights saved beside an fp32 master round odd ties to even (loaded_ties.hpp).
    ties_.note(i, offset, count, in[kMaster]);
    std::vector<std::uint16_t> low(n);
    for (std::size_t k = 0; k < n; ++k) low[k] = split_remainder(in[kMaster][k]);
    const auto first = static_cast<std::size_t>(m + offset);
    Kokkos::deep_copy(exec, Kokkos::subview(remainder_, std::make_pair(first, first + n)),
                      ConstHostRemainders(low.data(), n));
    fence(exec, label_ + "::write_state");  // `low` dies here
  }
  fence(exec, label_ + "::write_state");  // the host arrays may die right after
}

}  // namespace kopt::Impl
