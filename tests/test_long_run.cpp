// A long run with everything on (clipping, loss scaling with an overflow every 37 steps,
// params frozen now and then, a checkpoint every 1,000 steps), killed and resumed from its
// last checkpoint twice: the result is bitwise that of the run that never stopped.
#include <gtest/gtest.h>

#include <cmath>
#include <kopt/kopt.hpp>

#include "checkpoint_model.hpp"

namespace {
namespace test_long_run {

using kopt::DType;
using kopt_test::CheckpointModel;
using kopt_test::ParamDef;

const std::vector<ParamDef> kDefs = {{0, DType::f32, DType::f32, false, 13},
                                     {0, DType::bf16, DType::bf16, true, 40},
                                     {1, DType::f16, DType::f16, false, 7},
                                     {1, DType::f32, DType::bf16, true, 100}};

CheckpointModel make() {
  kopt::HybridOptions o;
  o.max_grad_norm = 1.0;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1024, .growth_interval = 30};
  return CheckpointModel(kDefs, {kopt::AdamConfig{.lr = 1e-3}, kopt::AdamConfig{.amsgrad = true}},
                         {0, 0, 1, 1}, {0, 1, 2, 3}, o);
}

// Step `s` of the run: grads of step s (an Inf every 37 steps; param 2 frozen for 20 of
// every 500 steps), then one optimizer step.
void advance(CheckpointModel& m, int s) {
  m.set_grads(s);
  if (s % 37 == 0) m.grads[0].poke(0, INFINITY);
  const bool frozen = s % 500 < 20;
  m.opt->set_grad(CheckpointModel::name(2), frozen ? kopt::Tensor{} : m.grads[2].tensor());
  m.opt->step();
}

TEST(LongRun, TenThousandStepsResumedTwiceMatchTheUninterruptedRun) {
  constexpr int steps = 10000, every = 1000;
  const kopt_test::TempDir dir;
  CheckpointModel straight = make();
  for (int s = 0; s < steps; ++s) advance(straight, s);

  auto run = std::make_unique<CheckpointModel>(make());
  std::vector<std::vector<double>> weights;  // the model checkpoint, beside the optimizer's
  int last_checkpoint = 0, crashes = 0;
  std::vector<int> crash_at = {3500, 7200};  // each happens once: the rerun goes past it
  for (int s = 0; s < steps; ++s) {
    if (s > 0 && s % every == 0) {
      run->opt->save(dir.str());
      weights.clear();
      for (auto& p : run->params) weights.push_back(p.get());
      last_checkpoint = s;
    }
    if (!crash_at.empty() && s == crash_at.front()) {  // killed; a new process resumes
      crash_at.erase(crash_at.begin());
      run = std::make_unique<CheckpointModel>(make());
      for (std::size_t j = 0; j < weights.size(); ++j) run->params[j].set(weights[j]);
      run->opt->load(dir.str());
      s = last_checkpoint;
      ++crashes;
    }
    advance(*run, s);
  }
  EXPECT_EQ(crashes, 2);
  straight.expect_same(*run);
  for (auto& p : straight.params)
    for (const double x : p.get()) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(straight.opt->step_count(CheckpointModel::name(0)), steps);  // overflows skipped
  EXPECT_LT(straight.opt->step_count(CheckpointModel::name(2)),
            straight.opt->step_count(CheckpointModel::name(1)));  // and frozen steps
}

// A loss scale so small that 1 / scale overflows a float (it halves on every overflow):
// the step is skipped, never run with an infinite factor that turns zero grads into NaN.
TEST(LongRun, ALossScaleTooSmallToUnscaleSkipsTheStep) {
  std::vector<float> w(4, 0.5f), g(4, 0.0f);
  kopt::ParamGroup group;
  group.add("w", kopt::Tensor::from(w.data(), 4), kopt::Tensor::from(g.data(), 4));
  kopt::HybridOptions o;
  o.loss_scaling = kopt::LossScalerOptions{.init_scale = 1e-39};
  kopt::HybridOptimizer opt({group}, o);
  const kopt::StepStats st = opt.step();
  EXPECT_TRUE(st.skipped);
  for (const float x : w) EXPECT_EQ(x, 0.5f);
  EXPECT_EQ(opt.step_count("w"), 0);
}

}  // namespace test_long_run
}  // namespace
