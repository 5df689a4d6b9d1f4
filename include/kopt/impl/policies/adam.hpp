#pragma once
/// \file
/// Adam and AdamW as a policy (kopt/impl/policy.hpp): the config and the element update are
/// kopt::AdamConfig and Impl::adam_update, public since kopt's first release.

#include <array>
#include <kopt/adam_config.hpp>
#include <kopt/adam_update.hpp>
#include <kopt/impl/policy.hpp>

namespace kopt::Impl {

struct AdamPolicy {
  using Config = AdamConfig;
  using Scalars = AdamStepScalars;
  static constexpr const char* name = Config::name;
  static constexpr std::size_t num_arrays = Config::state_array_names.size();
  static constexpr auto array_names = Config::state_array_names;
  /// 0: Adam(W); 1: with amsgrad's running max.
  static constexpr int num_variants = 2;
  static int variant(const Config& c) { return c.amsgrad ? 1 : 0; }
  KOKKOS_INLINE_FUNCTION static constexpr unsigned arrays_of(int variant) {
    return variant == 1 ? 7u : 3u;
  }
  static Scalars scalars(const Config& c, std::int64_t t, double grad_scale) {
    return AdamStepScalars::make(c, t, grad_scale);
  }
  template <int V>
  KOKKOS_FORCEINLINE_FUNCTION static float update(float p, float g, float& m, float& v, float& vmax,
                                                  const Scalars& s) {
    return adam_update<V == 1>(p, g, m, v, vmax, s);
  }
  /// The state arrays whose new values update_with passes through its guard: m and v (a
  /// FlagOverflow guard flags them where not finite); the lane loops flag the rest.
  static constexpr unsigned guarded_arrays = 0b011u;
  /// update()'s math with another guard, on floats or lane vectors: the optional hook of
  /// kopt/impl/paired_loop.hpp and paired_lanes.hpp (FlagOverflow runs it without the
  /// per-element overflow fallbacks, flagging overflow instead).
  template <int V, class T, class Guard>
  KOKKOS_FORCEINLINE_FUNCTION static T update_with(T p, T g, T& m, T& v, T& vmax, const Scalars& s,
                                                   const Guard& guard) {
    return adam_update_guarded<V == 1>(p, g, m, v, vmax, s, guard);
  }
};

}  // namespace kopt::Impl
