#pragma once
// A FusedOptimizer problem for any policy beside its double-precision reference: params of
// several sizes in groups of different configs, random grads each step, the same data handed
// to kopt and to the reference of each param's group.

#include <algorithm>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <memory>

#include "lion_signs.hpp"
#include "reference_algorithms.hpp"
#include "test_support.hpp"

namespace kopt_test {

template <class Config>
struct ReferenceOf;
template <>
struct ReferenceOf<kopt::SgdConfig> {
  using type = ReferenceSgd;
};
template <>
struct ReferenceOf<kopt::LionConfig> {
  using type = ReferenceLion;
};
template <>
struct ReferenceOf<kopt::AdagradConfig> {
  using type = ReferenceAdagrad;
};
template <>
struct ReferenceOf<kopt::LambConfig> {
  using type = ReferenceLamb;
};

// The reference's copy of the policy's state array 0, and the magnitudes its rounding
// errors scale with (a sum of squares is its own).
inline const std::vector<double>& reference_state(const ReferenceSgd& r) {
  return r.momentum_buffer;
}
inline const std::vector<double>& reference_state(const ReferenceLion& r) { return r.exp_avg; }
inline const std::vector<double>& reference_state(const ReferenceAdagrad& r) { return r.sum; }
inline const std::vector<double>& reference_state(const ReferenceLamb& r) { return r.exp_avg; }
inline const std::vector<double>& state_size(const ReferenceSgd& r) {
  return r.momentum_buffer_size;
}
inline const std::vector<double>& state_size(const ReferenceLion& r) { return r.exp_avg_size; }
inline const std::vector<double>& state_size(const ReferenceAdagrad& r) { return r.sum; }
inline const std::vector<double>& state_size(const ReferenceLamb& r) { return r.exp_avg_size; }

// Uniform values in [-1, 1) on a 2^-23 grid, rounded to T (quicker than
// std::uniform_real_distribution; the grads of 200 steps of 10^5 elements add up).
template <class T>
void fill_quick(std::vector<T>& v, std::mt19937& rng) {
  for (auto& x : v)
    x = kopt::Impl::from_float<T>(static_cast<float>(static_cast<std::int32_t>(rng()) >> 8) *
                                  0x1p-23f);
}

template <class Space, class Policy, class P, class G>
struct AlgorithmCase {
  using Config = typename Policy::Config;
  using Reference = typename ReferenceOf<Config>::type;
  static constexpr bool kIsLion = std::is_same_v<Config, kopt::LionConfig>;

  std::vector<std::unique_ptr<SpaceArray<P, Space>>> params;
  std::vector<std::unique_ptr<SpaceArray<G, Space>>> grads;
  std::vector<Reference> refs;
  // Per element, the largest |param| of the reference's trajectory so far: each step's
  // rounding errors scale with it (a param may end near 0 while its error does not).
  std::vector<std::vector<double>> param_size;
  std::vector<std::size_t> group_of;
  std::vector<Config> configs;
  kopt::FusedOptimizer<Space, Policy> opt;
  std::mt19937 rng;
  LionSigns signs;

  // Param j has sizes[j] elements and is in group groups[j] (config cfgs[groups[j]]).
  AlgorithmCase(const std::vector<Config>& cfgs, const std::vector<std::size_t>& sizes,
                const std::vector<std::size_t>& groups, unsigned seed)
      : configs(cfgs), opt(Space(), cfgs.at(0), "kopt::test_algorithms"), rng(seed) {
    for (std::size_t g = 1; g < cfgs.size(); ++g) opt.add_group(cfgs[g]);
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      params.push_back(std::make_unique<SpaceArray<P, Space>>(sizes[j]));
      grads.push_back(std::make_unique<SpaceArray<G, Space>>(sizes[j]));
      fill_quick(params[j]->host, rng);
      params[j]->upload();
      group_of.push_back(groups.at(j));
      refs.emplace_back(cfgs[group_of[j]], widen(params[j]->host));
      param_size.push_back(refs[j].param);
      for (double& x : param_size[j]) x = std::abs(x);
      opt.add(name(j), params[j]->tensor(), grads[j]->tensor(), group_of[j]);
    }
  }
  static std::string name(std::size_t j) { return "layer" + std::to_string(j) + ".weight"; }

  // The fp32 values kopt updates: the param, or its master.
  std::vector<double> updated_values(std::size_t j) {
    if constexpr (std::is_same_v<P, float>)
      return widen(params[j]->download());
    else
      return to_host(opt.state(name(j)).master);
  }

  // New random grads for every param, then one step of kopt and of the references.
  void step(double grad_scale) {
    for (std::size_t j = 0; j < grads.size(); ++j) {
      fill_quick(grads[j]->host, rng);
      grads[j]->upload();
    }
    std::vector<std::vector<double>> before;
    if constexpr (kIsLion)
      for (std::size_t j = 0; j < params.size(); ++j) before.push_back(updated_values(j));
    opt.step(grad_scale);
    Kokkos::fence();
    for (std::size_t j = 0; j < grads.size(); ++j) {
      const std::vector<double> g = widen(grads[j]->host);
      if constexpr (kIsLion) {
        const std::vector<double> dirs =
            lion_directions(refs[j], g, grad_scale, before[j], updated_values(j), signs, name(j));
        refs[j].update(g, grad_scale, &dirs);
      } else {
        refs[j].update(g, grad_scale);
      }
      for (std::size_t i = 0; i < g.size(); ++i)
        param_size[j][i] = std::max(param_size[j][i], std::abs(refs[j].param[i]));
    }
  }

  // Params (masters of 16-bit params), state array 0 and step counts against the
  // references: norm-wise error relative to the magnitudes it scales with below `tol`
  // (state: `state_tol`).
  void expect_matches_reference(double tol, double state_tol) {
    Kokkos::fence();
    for (std::size_t j = 0; j < params.size(); ++j) {
      SCOPED_TRACE(name(j) + " (group " + std::to_string(group_of[j]) + ", " +
                   std::to_string(params[j]->size()) + " elements)");
      const auto state = opt.state(name(j));
      EXPECT_EQ(state.step, refs[j].step);
      EXPECT_LT(error_relative_to(updated_values(j), refs[j].param, param_size[j]), tol);
      if constexpr (!std::is_same_v<P, float>) {
        const std::vector<double> master = to_host(state.master);
        params[j]->download();
        for (std::size_t i = 0; i < master.size(); ++i)  // the param is the master rounded once
          ASSERT_EQ(params[j]->host[i].bits, P::from_float(float(master[i])).bits) << i;
      }
      if (configs[group_of[j]].state_arrays() & 1u) {
        const std::vector<double> s = to_host(state.arrays[0]);
        ASSERT_EQ(s.size(), params[j]->size()) << Policy::array_names[0];
        EXPECT_LT(error_relative_to(s, reference_state(refs[j]), state_size(refs[j])), state_tol)
            << Policy::array_names[0];
      }
    }
  }
};

}  // namespace kopt_test
