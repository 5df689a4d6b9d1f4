#pragma once
/// \file
/// Growing one of an engine's state arrays (moments, amsgrad max, masters), written once for
/// the local engine (FusedAdam) and the offload engine.

#include <Kokkos_Core.hpp>
#include <array>
#include <kopt/impl/fault_injection.hpp>
#include <kopt/impl/huge_pages.hpp>
#include <string>
#include <type_traits>
#include <utility>

namespace kopt::Impl {

/// An engine's state arrays, in the order a checkpoint block holds them: the policy's
/// arrays (Policy::array_names; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq), then the master.
enum StateArray : std::size_t { kState0, kState1, kState2, kMaster };
inline constexpr std::size_t kStateSlots = 4;

/// Host arrays indexed by StateArray (null: not moved).
template <class T>
using StateArrays = std::array<T*, kStateSlots>;

/// Floats between the starts of an engine's state arrays within their allocations: array k
/// (StateArray: the policy's 0-2, master 3) starts 17 k cache lines (1088 k bytes) in.
/// Allocated alike, the arrays would all start at the same offset within a 4 KiB page, and
/// the loads and stores an update issues to them side by side would share their address
/// bits below 4 KiB (the CPU then stalls loads behind stores it cannot tell apart). Measured
/// on the 2-core EPYC, 1 thread, fp32 at 2^24: 22-24 GB/s without, 30-31 GB/s with.
inline constexpr std::size_t state_stagger_floats = 272;

/// `old` (state array `which`, of floats or 16-bit remainders) grown to n elements (returned as it
/// is when it has them): a new array, advised onto huge pages before its first touch when it is
/// host memory, zero-filled on `exec` (so the threads that update a page touch it first, and fresh
/// state starts at 0), then `old` copied in. A failure leaves `old` as it was.
template <class View, class Exec>
View grow_state_array(const Exec& exec, const View& old, std::int64_t n, const std::string& label,
                      StateArray which) {
  using T = typename View::non_const_value_type;
  if (static_cast<std::int64_t>(old.extent(0)) == n) return old;
  allocation_point();
  const std::size_t pad = which * state_stagger_floats * sizeof(float) / sizeof(T);
  const auto count = static_cast<std::size_t>(n);
  View whole(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, label), pad + count);
  if constexpr (std::is_same_v<typename View::memory_space, Kokkos::HostSpace>)
    advise_huge_pages(whole.data(), whole.span() * sizeof(T));
  Kokkos::deep_copy(exec, whole, T{});
  View grown = Kokkos::subview(whole, std::make_pair(pad, pad + count));
  if (old.extent(0) > 0)
    Kokkos::deep_copy(exec, Kokkos::subview(grown, std::make_pair(std::size_t{0}, old.extent(0))),
                      old);
  return grown;
}

}  // namespace kopt::Impl
