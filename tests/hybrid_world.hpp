#pragma once
// A HybridOptimizer over params of several groups, dtypes and memory spaces, beside one
// double-precision reference per param (its own group's config) and the global clipping and
// loss-scaling rules applied the way torch applies them.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

#include "buffer.hpp"
#include "reference_adam.hpp"

namespace kopt_test {

struct ParamDef {
  std::size_t group;
  kopt::DType param;
  kopt::DType grad;
  bool on_device;  // in the default execution space's memory (the host's without a device)
  std::size_t n;
};

struct HybridWorld {
  std::vector<kopt::AdamConfig> configs;
  std::vector<ParamDef> defs;
  kopt::HybridOptions options;
  std::vector<Buffer> params, grads;
  std::vector<ReferenceAdam> refs;
  std::vector<std::vector<double>> last_grads;  // as stored (scaled, rounded)
  std::unique_ptr<kopt::HybridOptimizer> opt;
  std::mt19937 rng;

  // `host_state[g]`: group g is StatePlacement::host (offloaded); missing entries: with_params.
  HybridWorld(std::vector<kopt::AdamConfig> cfgs, std::vector<ParamDef> ds,
              kopt::HybridOptions opts = {}, unsigned seed = 11,
              const std::vector<bool>& host_state = {})
      : configs(std::move(cfgs)), defs(std::move(ds)), options(opts), rng(seed) {
    std::vector<kopt::ParamGroup> groups;
    for (std::size_t g = 0; g < configs.size(); ++g)
      groups.emplace_back(configs[g], g < host_state.size() && host_state[g]
                                          ? kopt::StatePlacement::host
                                          : kopt::StatePlacement::with_params);
    for (std::size_t j = 0; j < defs.size(); ++j) {
      const ParamDef& d = defs[j];
      params.emplace_back(d.param, d.on_device, d.n);
      grads.emplace_back(d.grad, d.on_device, d.n);
      params[j].set(random(d.n));
      refs.emplace_back(configs[d.group], params[j].get());
      groups[d.group].add(name(j), params[j].tensor(), grads[j].tensor());
    }
    last_grads.resize(defs.size());
    opt = std::make_unique<kopt::HybridOptimizer>(std::move(groups), options);
  }
  static std::string name(std::size_t j) { return "p" + std::to_string(j); }
  std::vector<double> random(std::size_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<double> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  }
  // New grads for every param, multiplied by `scale` (the loss scale the training code used).
  void new_grads(double scale = 1.0) {
    for (std::size_t j = 0; j < defs.size(); ++j) {
      std::vector<double> g = random(defs[j].n);
      for (auto& x : g) x *= scale;
      grads[j].set(g);
      last_grads[j] = grads[j].get();
    }
  }
  // The reference step for the grads last set: global norm, clip, unscale; params whose
  // grad was nulled (`frozen`) are left out.
  kopt::StepStats reference_step(double scale, const std::vector<bool>& frozen = {}) {
    double sum_sq = 0;
    for (std::size_t j = 0; j < defs.size(); ++j)
      if (frozen.empty() || !frozen[j])
        for (double g : last_grads[j]) sum_sq += g * g;
    const double norm = std::sqrt(sum_sq) / scale;
    double clip = 1.0;
    if (options.max_grad_norm) clip = std::min(1.0, *options.max_grad_norm / (norm + 1e-6));
    for (std::size_t j = 0; j < defs.size(); ++j)
      if (frozen.empty() || !frozen[j]) refs[j].update(last_grads[j], clip / scale);
    return kopt::StepStats{norm, clip, false, scale};
  }
  void expect_matches_reference(double tol) {
    for (std::size_t j = 0; j < defs.size(); ++j) {
      SCOPED_TRACE(name(j) + " group " + std::to_string(defs[j].group) + " " +
                   kopt::name_of(defs[j].param) + (defs[j].on_device ? " device" : " host"));
      const double bound = defs[j].param == kopt::DType::f32    ? tol
                           : defs[j].param == kopt::DType::bf16 ? std::ldexp(1.0, -8) + tol
                                                                : std::ldexp(1.0, -11) + tol;
      EXPECT_LT(relative_error(params[j].get(), refs[j].param), bound);
      EXPECT_EQ(opt->step_count(name(j)), refs[j].step);
    }
  }
};

// Params of every group in f32, bf16 and f16, half of them in device memory.
inline std::vector<ParamDef> mixed_defs(std::size_t groups) {
  std::vector<ParamDef> defs;
  const std::size_t sizes[] = {1, 13, 1000, 8199};
  for (std::size_t g = 0; g < groups; ++g)
    for (std::size_t k = 0; k < 4; ++k) {
      const kopt::DType p[] = {kopt::DType::f32, kopt::DType::bf16, kopt::DType::f16,
                               kopt::DType::f32};
      const kopt::DType gr[] = {kopt::DType::f32, kopt::DType::f32, kopt::DType::f16,
                                kopt::DType::bf16};
      defs.push_back(ParamDef{g, p[k], gr[k], (g + k) % 2 == 1, sizes[(g + k) % 4]});
    }
  return defs;
}

}  // namespace kopt_test
