// kopt::HybridOptimizer: every lesson of DESIGN.md as a test that fails if it comes back.
// Params live in host memory and in the default execution space's (device memory on a CUDA
// build), so the same tests cover the host path, the device path and both at once.
#include "adam_case.hpp"
#include "hybrid_world.hpp"

namespace {
namespace test_hybrid_optimizer {

using namespace kopt_test;
using kopt::DType;

TEST(HybridOptimizer, EveryGroupMatchesTheReferenceForItsOwnConfig) {
  HybridWorld w(every_variant(), mixed_defs(5));
  for (int s = 0; s < 20; ++s) {
    w.new_grads();
    w.opt->step();
    w.reference_step(1.0);
  }
  w.expect_matches_reference(fp32_bound(20));
}

TEST(HybridOptimizer, PlansOneEnginePerSpaceAndDtype) {
  HybridWorld w(every_variant(), mixed_defs(5));
  std::size_t expected = 3;  // f32, bf16, f16 on the host
#ifdef KOKKOS_ENABLE_CUDA
  expected = 6;  // and on the device
#endif
  EXPECT_EQ(w.opt->num_engines(), expected);
  w.new_grads();
  w.opt->step();
  std::size_t total = 0;
  for (const auto& [space, bytes] : w.opt->state_bytes()) total += bytes;
  EXPECT_GE(total, 2 * 4 * (1 + 13 + 1000 + 8199) * 5u);  // m and v of every element at least
}

TEST(HybridOptimizer, ScheduleChangesReachEveryPath) {
  HybridWorld w(every_variant(), mixed_defs(5));
  for (int s = 0; s < 10; ++s) {
    for (std::size_t g = 0; g < w.configs.size(); ++g) {
      w.opt->group(g).config().lr = w.configs[g].lr * (1.0 - 0.05 * s);
      w.opt->group(g).config().weight_decay = 0.01 * s;
    }
    for (std::size_t j = 0; j < w.defs.size(); ++j)
      w.refs[j].config = w.opt->group(w.defs[j].group).config();
    w.new_grads();
    w.opt->step();
    w.reference_step(1.0);
  }
  w.expect_matches_reference(fp32_bound(10));
}

TEST(HybridOptimizer, RebindToNewMemoryMatchesAnOptimizerThatNeverRebound) {
  HybridWorld a(every_variant(), mixed_defs(5), {}, 5);
  HybridWorld b(every_variant(), mixed_defs(5), {}, 5);
  std::vector<Buffer> new_params, new_grads;
  for (int s = 0; s < 8; ++s) {
    if (s == 4) {  // the framework swaps every tensor for a copy in new memory
      for (std::size_t j = 0; j < a.defs.size(); ++j) {
        new_params.emplace_back(a.defs[j].param, a.defs[j].on_device, a.defs[j].n);
        new_params.back().set(a.params[j].get());
        new_grads.emplace_back(a.defs[j].grad, a.defs[j].on_device, a.defs[j].n);
      }
      for (std::size_t j = 0; j < a.defs.size(); ++j) {
        a.params[j] = new_params[j];
        a.grads[j] = new_grads[j];
        a.opt->rebind(a.name(j), a.params[j].tensor(), a.grads[j].tensor());
      }
    }
    a.new_grads();
    b.new_grads();
    a.opt->step();
    b.opt->step();
  }
  for (std::size_t j = 0; j < a.defs.size(); ++j) EXPECT_EQ(a.params[j].get(), b.params[j].get());
}

// A resumed run: the optimizer holds masters, then model weights are loaded.
void model_only_load(bool reload) {
  HybridWorld w({kopt::AdamConfig{.lr = 0.01}}, {ParamDef{0, DType::bf16, DType::f32, false, 64},
                                                 ParamDef{0, DType::bf16, DType::f32, true, 77}});
  w.new_grads();
  w.opt->step();
  for (std::size_t j = 0; j < w.defs.size(); ++j) {
    w.params[j].set(w.random(w.defs[j].n, 2.0, 3.0));  // "loaded" weights, far from the old
    w.refs[j].param = w.params[j].get();
  }
  if (reload) w.opt->reload_model_params();
  w.new_grads();
  w.opt->step();
  w.reference_step(1.0);
  for (std::size_t j = 0; j < w.defs.size(); ++j) {
    const double err = relative_error(w.params[j].get(), w.refs[j].param);
    if (reload) {
      EXPECT_LT(err, std::ldexp(1.0, -8)) << "one step from the loaded weights";
    } else {
      // After a step the optimizer owns the masters: weights written then are not picked
      // up until reload_model_params() (masters follow the params only until a first step).
      EXPECT_GT(err, 0.5) << "without the reload the stale masters win";
    }
  }
}

TEST(HybridOptimizer, ModelOnlyLoadThenReloadStepsFromTheLoadedWeights) { model_only_load(true); }
TEST(HybridOptimizer, ModelOnlyLoadWithoutReloadStepsFromStaleMasters) { model_only_load(false); }

TEST(HybridOptimizer, IntermittentGradsKeepTheirOwnStepCountAndBiasCorrection) {
  HybridWorld w(every_variant(), mixed_defs(5));
  for (int s = 1; s <= 10; ++s) {
    w.new_grads();
    std::vector<bool> frozen(w.defs.size(), false);
    for (std::size_t j = 1; j < w.defs.size(); j += 3) {  // grads only on odd steps
      frozen[j] = s % 2 == 0;
      w.opt->set_grad(w.name(j), frozen[j] ? kopt::Tensor{} : w.grads[j].tensor());
    }
    w.opt->step();
    w.reference_step(1.0, frozen);
  }
  for (std::size_t j = 0; j < w.defs.size(); ++j)
    EXPECT_EQ(w.opt->step_count(w.name(j)), j % 3 == 1 ? 5 : 10) << w.name(j);
  w.expect_matches_reference(fp32_bound(10));
}

TEST(HybridOptimizer, ClippingMatchesTorchClipGradNorm) {
  kopt::HybridOptions options;
  options.max_grad_norm = 2.0;  // the grads' norm is ~ 60: clipping is active
  HybridWorld w(every_variant(), mixed_defs(5), options);
  for (int s = 0; s < 10; ++s) {
    w.new_grads();
    const kopt::StepStats got = w.opt->step();
    const kopt::StepStats want = w.reference_step(1.0);
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-12 * want.grad_norm);
    EXPECT_NEAR(got.clip_factor, want.clip_factor, 1e-12);
    EXPECT_LT(got.clip_factor, 0.1);
    EXPECT_FALSE(got.skipped);
  }
  w.expect_matches_reference(fp32_bound(10));
}

TEST(HybridOptimizer, GradNormIsTheSameWhateverTheSplit) {
  // The same grads as one f32 host group, and spread over groups, dtypes and spaces.
  kopt::HybridOptions options;
  options.max_grad_norm = 1.0;
  std::vector<ParamDef> split = mixed_defs(3);
  for (auto& d : split) d.grad = DType::f32;  // identical values on both sides
  std::vector<ParamDef> whole = split;
  for (auto& d : whole) d = ParamDef{0, DType::f32, DType::f32, false, d.n};
  HybridWorld a(every_variant(), split, options, 3), b({kopt::AdamConfig{}}, whole, options, 3);
  a.new_grads();
  for (std::size_t j = 0; j < b.defs.size(); ++j) b.grads[j].set(a.last_grads[j]);
  const double na = a.opt->step().grad_norm, nb = b.opt->step().grad_norm;
  EXPECT_NEAR(na, nb, 1e-13 * nb);
}

// Loss scaling with an Inf or NaN injected into one param of one group.
void injected_overflow(bool clip, double bad) {
  kopt::HybridOptions options;
  if (clip) options.max_grad_norm = 5.0;
  options.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 3};
  HybridWorld w(every_variant(), mixed_defs(5), options);
  double scale = 1024;
  for (int s = 1; s <= 8; ++s) {
    EXPECT_EQ(w.opt->loss_scale(), scale);
    w.new_grads(scale);
    if (s == 4) {
      w.grads[6].poke(5, bad);
      std::vector<std::vector<double>> before, before_state;
      for (auto& p : w.params) before.push_back(p.get());
      const kopt::StepStats st = w.opt->step();
      EXPECT_TRUE(st.skipped);
      EXPECT_FALSE(std::isfinite(st.grad_norm));
      scale /= 2;
      EXPECT_EQ(st.loss_scale, scale);
      for (std::size_t j = 0; j < w.params.size(); ++j) {
        EXPECT_EQ(w.params[j].get(), before[j]) << "no param changes anywhere";
        EXPECT_EQ(w.opt->step_count(w.name(j)), 3) << "no step counter changes";
      }
      continue;
    }
    const kopt::StepStats st = w.opt->step();
    const kopt::StepStats want = w.reference_step(scale);
    EXPECT_FALSE(st.skipped);
    EXPECT_NEAR(st.grad_norm, want.grad_norm, 1e-12 * want.grad_norm);
    if (s == 3 || s == 7) scale *= 2;  // 3 finite steps in a row since the start / the backoff
    EXPECT_EQ(st.loss_scale, scale);
  }
  w.expect_matches_reference(fp32_bound(8));
}

TEST(HybridOptimizer, LossScalingSkipsAnInfStepEverywhereAndBacksOff) {
  injected_overflow(false, INFINITY);
}
TEST(HybridOptimizer, LossScalingSkipsANaNStepEverywhereWithClipping) {
  injected_overflow(true, NAN);
}

}  // namespace test_hybrid_optimizer
}  // namespace
