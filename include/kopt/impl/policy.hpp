#pragma once
/// \file
/// What an algorithm is to kopt: a policy. The engines (local and offload), sharding,
/// checkpoints, the norm and clipping are written once for every policy; a policy holds one
/// optimizer's math and the shape of its state, and nothing else:
///
///   struct SomePolicy {
///     using Config = SomeConfig;            // public (kopt/some_config.hpp): torch's names
///                                           // and defaults, validate(), visit_fields(),
///                                           // name, state_arrays(), using Policy
///     using Scalars = SomeStepScalars;      // floats the update needs, made on the host
///     static constexpr const char* name = Config::name;
///     static constexpr std::size_t num_arrays =          // state arrays, at most 3: the
///         Config::state_array_names.size();              // config names them (public,
///     static constexpr auto array_names =                // Kokkos-free: checkpoints
///         Config::state_array_names;                     // check masks against them)
///     static constexpr int num_variants;    // compile-time forms of the update
///     static int variant(const Config&);    // the form a group's config runs
///     KOKKOS_INLINE_FUNCTION                // (host and device: the kernels ask it)
///     static constexpr unsigned arrays_of(int variant);   // bit k: array k is kept; for
///                                           // every config, arrays_of(variant(c)) equals
///                                           // c.state_arrays() (tests/test_algorithms.cpp)
///     static Scalars scalars(const Config&, std::int64_t t, double grad_scale);
///     template <int V> KOKKOS_FORCEINLINE_FUNCTION
///     static float update(float p, float g, float& s0, float& s1, float& s2, const Scalars&);
///   };
///
/// A policy whose update guards rare elements at a cost to every one (Adam's overflow
/// fallbacks) may also give `update_with<V>(p, g, s0, s1, s2, scalars, guard)`, its math on
/// floats or lane vectors under the caller's guard: FlagOverflow gives the same bits wherever
/// it leaves bit 31 of its flags clear (kopt/impl/paired_loop.hpp, paired_lanes.hpp).
///
/// `update` takes the param (or its fp32 master) and the raw grad, updates the state
/// elements it keeps (s0..s2, array k; the others are scratch), and returns the new param.
/// Every state array is fp32 to the policy (stored in its StateStorage dtype, widened for the
/// update and rounded back after it), starts at zero and sits at the param's offset; a state whose
/// torch form starts elsewhere (Adagrad's initial accumulator, SGD's first momentum buffer)
/// starts there through the scalars of step t = 1.

#include <cstddef>
#include <cstdint>
#include <kopt/compat.hpp>
#include <kopt/state_storage.hpp>  // max_state_arrays
#include <kopt/storage_types.hpp>

namespace kopt::Impl {

/// sign(x) as torch's: -1, 0 or 1 (signed zeros give 0), NaN for NaN. Written without a
/// branch or a select on x (a mask picks x itself for NaN, as finite_or does): with `?:` GCC
/// kept a branch per element, mispredicted half the time on random signs, and Lion ran at a
/// twentieth of its ceiling.
KOKKOS_FORCEINLINE_FUNCTION float sign_of(float x) {
  const float s = static_cast<float>(x > 0.0f) - static_cast<float>(x < 0.0f);
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(x == x);  // all ones unless NaN
  return bits_float((float_bits(s) & keep) | (float_bits(x) & ~keep));
}

}  // namespace kopt::Impl
