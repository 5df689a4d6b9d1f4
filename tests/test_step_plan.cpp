// FusedAdam keeps its step plan (chunk tables, slots, one row of step scalars per group and
// step count) between steps and rebuilds it only when something it depends on changed.
// Each test changes one such thing between steps and checks every param against the
// double-precision reference: a stale plan shows as a wrong bias correction, learning rate,
// grad or param.
#include "adam_case.hpp"

namespace {
namespace test_step_plan {

using namespace kopt_test;
using kopt::bfloat16;

template <class Space>
class StepPlanTest : public ::testing::Test {};
TYPED_TEST_SUITE(StepPlanTest, EnabledSpaces, SpaceName);

using Case = std::vector<std::size_t>;
const Case kSizes = {1, 13, 8192 + 5, 0, 300, 17, 64};  // two groups, alternating

// One step of the params in `stepping` (the others get a null grad, then their grad back).
template <class Space>
void step_some(AdamCase<Space, bfloat16, float>& c, const std::vector<bool>& stepping,
               double grad_scale = 1.0) {
  for (std::size_t j = 0; j < c.params.size(); ++j) {
    if (!stepping[j]) {
      c.opt.set_grad(c.name(j), kopt::Tensor());
      continue;
    }
    fill_uniform(c.grads[j]->host, c.rng, -1.0f, 1.0f);
    c.grads[j]->upload();
    c.opt.set_grad(c.name(j), c.grads[j]->tensor());
  }
  c.opt.step(grad_scale);
  for (std::size_t j = 0; j < c.params.size(); ++j)
    if (stepping[j]) c.refs[j].update(widen(c.grads[j]->host), grad_scale);
}

TYPED_TEST(StepPlanTest, ScheduleFrozenParamsAndAmsgradFlipBetweenSteps) {
  AdamCase<TypeParam, bfloat16, float> c(
      {kopt::AdamConfig{}, kopt::AdamConfig{.lr = 2e-3, .weight_decay = 0.0}}, kSizes);
  const std::vector<bool> all(kSizes.size(), true);
  for (int s = 0; s < 3; ++s) c.step();
  // A schedule: the next step must use the new lr, though nothing else changed.
  c.opt.config(0).lr *= 0.5;
  for (std::size_t j = 0; j < kSizes.size(); ++j)
    if (c.group_of[j] == 0) c.refs[j].config.lr = c.opt.config(0).lr;
  c.step();
  // Params 1 and 4 frozen for two steps: their group then has two step counts (two rows).
  std::vector<bool> some = all;
  some[1] = some[4] = false;
  step_some(c, some);
  step_some(c, some);
  step_some(c, all);
  step_some(c, all);
  const auto amsgrad = [&](bool on) {
    c.opt.config(1).amsgrad = c.configs[1].amsgrad = on;
    for (std::size_t j = 0; j < kSizes.size(); ++j)
      if (c.group_of[j] == 1) c.refs[j].config.amsgrad = on;
  };
  // amsgrad switched on in group 1 between steps...
  amsgrad(true);
  step_some(c, all);
  step_some(c, all, 1e-3);  // small grads: exp_avg_sq falls below its max
  c.expect_matches_reference(10);
  // ...and off again (the max array stays allocated: only the plan knows).
  amsgrad(false);
  step_some(c, all, 1e-3);
  c.expect_matches_reference(11);
  EXPECT_EQ(c.opt.step_count(c.name(1)), 9);
  EXPECT_EQ(c.opt.step_count(c.name(0)), 11);
}

TYPED_TEST(StepPlanTest, SetStateGivesOneParamItsOwnStepCount) {
  AdamCase<TypeParam, bfloat16, float> c({kopt::AdamConfig{}}, kSizes);
  for (int s = 0; s < 3; ++s) c.step();
  // Param 2 gets step 40 and its own moments back (as a checkpoint load would): its next
  // update's bias corrections are step 41's, its neighbours' step 4's.
  const std::string moved = c.name(2);
  const auto state = c.opt.state(moved);
  const auto floats = [](const std::vector<double>& d) {
    return std::vector<float>(d.begin(), d.end());  // exact: the doubles came from floats
  };
  const std::vector<float> m = floats(to_host(state.exp_avg)),
                           v = floats(to_host(state.exp_avg_sq)), w = floats(to_host(state.master));
  c.opt.set_state(moved, 40, m.data(), v.data(), nullptr, w.data());
  c.refs[2].step = 40;
  for (int s = 0; s < 2; ++s) c.step();
  c.expect_matches_reference(5);
  EXPECT_EQ(c.opt.step_count(moved), 42);
  EXPECT_EQ(c.opt.step_count(c.name(1)), 5);
}

TYPED_TEST(StepPlanTest, NewGradAndParamMemoryIsWhatTheNextStepReads) {
  AdamCase<TypeParam, bfloat16, float> c({kopt::AdamConfig{}}, kSizes);
  for (int s = 0; s < 2; ++s) c.step();
  // Param 0's grad moves to a new array; param 2 (param and grad) to new arrays holding the
  // same values. The old arrays then hold values the step must not read or write.
  auto grad0 = std::make_unique<SpaceArray<float, TypeParam>>(kSizes[0]);
  auto param2 = std::make_unique<SpaceArray<bfloat16, TypeParam>>(kSizes[2]);
  auto grad2 = std::make_unique<SpaceArray<float, TypeParam>>(kSizes[2]);
  param2->host = c.params[2]->download();
  param2->upload();
  c.opt.set_grad(c.name(0), grad0->tensor());
  c.opt.rebind(c.name(2), param2->tensor(), grad2->tensor());
  std::swap(c.grads[0], grad0);
  std::swap(c.params[2], param2);
  std::swap(c.grads[2], grad2);
  for (auto* old : {grad0.get(), grad2.get()}) {
    std::fill(old->host.begin(), old->host.end(), 1e30f);
    old->upload();
  }
  std::fill(param2->host.begin(), param2->host.end(), bfloat16::from_float(7.0f));
  param2->upload();
  for (int s = 0; s < 2; ++s) c.step();
  c.expect_matches_reference(4);
  for (const bfloat16 x : param2->download()) ASSERT_EQ(x.bits, bfloat16::from_float(7.0f).bits);
}

}  // namespace test_step_plan
}  // namespace
