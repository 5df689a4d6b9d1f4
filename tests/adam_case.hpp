#pragma once
// A fused-Adam problem on one execution space beside its double-precision reference: the
// same params, grads and configs handed to kopt::FusedAdam and to ReferenceAdam.

#include <cfloat>
#include <cmath>
#include <memory>

#include "reference_adam.hpp"
#include "test_support.hpp"

namespace kopt_test {

// Norm-wise relative error bound for `steps` steps with state in float: a few float ulps,
// plus rounding errors that accumulate like a random walk. (Measured: 1e-7 after one step,
// 7e-7 after 1000; the bound is 4e-7 and 1.6e-6.)
inline double fp32_bound(int steps) { return FLT_EPSILON * (3.0 + std::sqrt(double(steps)) / 3.0); }
// Bound for a param rounded to H once after an accurate update: half an ulp of H, plus the
// fp32 error.
template <class H>
double storage_bound(int steps) {
  if constexpr (std::is_same_v<H, float>)
    return fp32_bound(steps);
  else if constexpr (std::is_same_v<H, kopt::bfloat16>)
    return std::ldexp(1.0, -8) + fp32_bound(steps);
  else
    return std::ldexp(1.0, -11) + fp32_bound(steps);
}

template <class Space, class P, class G>
struct AdamCase {
  std::vector<std::unique_ptr<SpaceArray<P, Space>>> params;
  std::vector<std::unique_ptr<SpaceArray<G, Space>>> grads;
  std::vector<ReferenceAdam> refs;
  std::vector<std::size_t> group_of;
  std::vector<kopt::AdamConfig> configs;
  kopt::FusedAdam<Space> opt;
  std::mt19937 rng;

  // Params j = 0..sizes.size()-1 of sizes[j], in group j % configs.size().
  AdamCase(const std::vector<kopt::AdamConfig>& cfgs, const std::vector<std::size_t>& sizes,
           unsigned seed = 1)
      : configs(cfgs), opt(Space(), cfgs.at(0), "kopt::test_adam"), rng(seed) {
    for (std::size_t g = 1; g < cfgs.size(); ++g) opt.add_group(cfgs[g]);
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      params.push_back(std::make_unique<SpaceArray<P, Space>>(sizes[j]));
      grads.push_back(std::make_unique<SpaceArray<G, Space>>(sizes[j]));
      fill_uniform(params[j]->host, rng, -1.0f, 1.0f);
      params[j]->upload();
      group_of.push_back(j % cfgs.size());
      refs.emplace_back(cfgs[group_of[j]], widen(params[j]->host));
      opt.add(name(j), params[j]->tensor(), grads[j]->tensor(), group_of[j]);
    }
  }
  static std::string name(std::size_t j) { return "layer" + std::to_string(j) + ".weight"; }

  // New random grads for every param, then one step of both.
  void step(double grad_scale = 1.0) {
    for (std::size_t j = 0; j < grads.size(); ++j) {
      fill_uniform(grads[j]->host, rng, -1.0f, 1.0f);
      grads[j]->upload();
    }
    opt.step(grad_scale);
    for (std::size_t j = 0; j < grads.size(); ++j)
      refs[j].update(widen(grads[j]->host), grad_scale);
  }

  // Checks params, masters and moments of every param against the reference.
  void expect_matches_reference(int steps) {
    Kokkos::fence();
    for (std::size_t j = 0; j < params.size(); ++j) {
      SCOPED_TRACE(name(j) + " (group " + std::to_string(group_of[j]) + ", " +
                   std::to_string(params[j]->size()) + " elements)");
      const auto state = opt.state(name(j));
      EXPECT_EQ(state.step, refs[j].step);
      const std::vector<double> p = widen(params[j]->download());
      EXPECT_LT(relative_error(p, refs[j].param), storage_bound<P>(steps));
      if constexpr (!std::is_same_v<P, float>) {
        const std::vector<double> master = to_host(state.master);
        EXPECT_LT(relative_error(master, refs[j].param), fp32_bound(steps));
        for (std::size_t i = 0; i < master.size(); ++i)  // the param is the master rounded once
          ASSERT_EQ(params[j]->host[i].bits, P::from_float(float(master[i])).bits) << i;
      }
      EXPECT_LT(relative_error(to_host(state.exp_avg), refs[j].exp_avg), fp32_bound(steps));
      EXPECT_LT(relative_error(to_host(state.exp_avg_sq), refs[j].exp_avg_sq), fp32_bound(steps));
      if (configs[group_of[j]].amsgrad) {
        EXPECT_LT(relative_error(to_host(state.max_exp_avg_sq), refs[j].max_exp_avg_sq),
                  fp32_bound(steps));
      }
    }
  }
};

// Five groups that between them exercise every switch of AdamConfig.
inline std::vector<kopt::AdamConfig> every_variant() {
  return {
      kopt::AdamConfig{},                                                     // AdamW defaults
      kopt::AdamConfig{.lr = 3e-3, .weight_decay = 0.1, .decoupled = false},  // Adam + L2
      kopt::AdamConfig{.lr = 2e-3, .beta2 = 0.99, .amsgrad = true},           // AMSGrad
      kopt::AdamConfig{.lr = 5e-4, .eps = 1e-6, .weight_decay = 0.0, .maximize = true},
      kopt::AdamConfig{.beta1 = 0.8, .weight_decay = 0.05, .bias_correction = false},
  };
}

}  // namespace kopt_test
