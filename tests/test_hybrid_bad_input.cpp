// Bad input to the HybridOptimizer: a clear kopt::Error, and nothing half-applied.
#include <array>
#include <cmath>
#include <functional>

#include "checkpoint_model.hpp"
#include "hybrid_world.hpp"
#include "test_support.hpp"

namespace {
namespace test_hybrid_bad_input {

using namespace kopt_test;
using kopt::DType;

class HybridBadInput : public ::testing::Test {
 protected:
  HybridWorld w{
      {kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true}},
      {ParamDef{0, DType::f32, DType::f32, false, 13},
       ParamDef{1, DType::bf16, DType::bf16, true, 29}},
      kopt::HybridOptions{.max_grad_norm = 1.0, .loss_scaling = kopt::LossScalerOptions{}}};
  std::vector<std::vector<double>> params_before;

  void SetUp() override {
    w.new_grads(w.opt->loss_scale());
    w.opt->step();
    for (auto& p : w.params) params_before.push_back(p.get());
  }
  // Nothing changed: params, step counts and loss scale as after SetUp, and a good step
  // still works from there.
  void expect_unchanged() {
    for (std::size_t j = 0; j < w.params.size(); ++j) {
      EXPECT_EQ(w.params[j].get(), params_before[j]);
      EXPECT_EQ(w.opt->step_count(w.name(j)), 1);
    }
    EXPECT_EQ(w.opt->loss_scale(), 65536.0);
  }
};

TEST(HybridConstruction, DuplicateNamesAcrossGroups) {
  Buffer p(DType::f32, false, 4), g(DType::f32, false, 4);
  std::vector<kopt::ParamGroup> groups(2);
  groups[0].add("w", p.tensor(), g.tensor());
  groups[1].add("w", p.tensor(), g.tensor());
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt(groups); },
                                      "parameter name 'w' is used twice");
  expect_error<kopt::InvalidArgument>([&] { groups[0].add("w", p.tensor(), g.tensor()); },
                                      "already in this group");
}

TEST(HybridConstruction, GradOfTheWrongSizeAndBadOptions) {
  Buffer p(DType::f32, false, 4), g(DType::f32, false, 5);
  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", p.tensor(), g.tensor());
  expect_error<kopt::ShapeMismatch>([&] { kopt::HybridOptimizer opt(groups); },
                                    "grad of 'w' has 5 elements but the param has 4");
  std::vector<kopt::ParamGroup> fine(1);
  fine[0].add("w", p.tensor());
  expect_error<kopt::InvalidArgument>(
      [&] { kopt::HybridOptimizer opt(fine, {.max_grad_norm = -1.0}); }, "max_grad_norm = -1");
  expect_error<kopt::InvalidArgument>(
      [&] {
        kopt::HybridOptimizer opt(fine,
                                  {.loss_scaling = kopt::LossScalerOptions{.backoff_factor = 2}});
      },
      "backoff_factor = 2");
  std::vector<kopt::ParamGroup> bad_lr(1);
  bad_lr[0].add("w", p.tensor());
  bad_lr[0].config().lr = NAN;
  expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt(bad_lr); }, "group 0");
}

#ifndef KOKKOS_ENABLE_CUDA
TEST(HybridConstruction, ParamsInASpaceThisBuildLacksAreNotCompiled) {
  Buffer p(DType::f32, false, 4);
  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", kopt::Tensor(p.host.data(), 4, DType::f32, kopt::MemorySpace::cuda));
  expect_error<kopt::NotCompiled>([&] { kopt::HybridOptimizer opt(groups); },
                                  "memory space 'cuda'");
}
#endif

TEST_F(HybridBadInput, UnknownNameInRebindAndSetGrad) {
  expect_error<kopt::InvalidArgument>(
      [&] { w.opt->rebind("nope", w.params[0].tensor(), w.grads[0].tensor()); },
      "no parameter named 'nope'");
  expect_error<kopt::InvalidArgument>([&] { w.opt->set_grad("nope", w.grads[0].tensor()); },
                                      "no parameter named 'nope'");
  expect_unchanged();
}

TEST_F(HybridBadInput, SizeOrDtypeChangeOnRebind) {
  Buffer bigger(DType::f32, false, 14), other_dtype(DType::f16, false, 13);
  expect_error<kopt::ShapeMismatch>(
      [&] { w.opt->rebind(w.name(0), bigger.tensor(), kopt::Tensor{}); }, "to 14 elements");
  expect_error<kopt::InvalidArgument>(
      [&] { w.opt->rebind(w.name(0), other_dtype.tensor(), kopt::Tensor{}); }, "to dtype f16");
  Buffer small_grad(DType::f32, false, 3);
  expect_error<kopt::ShapeMismatch>([&] { w.opt->set_grad(w.name(0), small_grad.tensor()); },
                                    "has 3 elements");
  expect_unchanged();
  // After the failed calls the old memory is still bound: a step updates it.
  w.new_grads(w.opt->loss_scale());
  EXPECT_FALSE(w.opt->step().skipped);
  EXPECT_NE(w.params[0].get(), params_before[0]);
}

TEST_F(HybridBadInput, NonFiniteLearningRateIsRefusedBeforeAnythingMoves) {
  w.opt->group(1).config().lr = NAN;
  w.new_grads(w.opt->loss_scale());
  expect_error<kopt::InvalidArgument>([&] { w.opt->step(); }, "group 1: AdamConfig.lr = nan");
  expect_unchanged();
  expect_error<kopt::InvalidArgument>([&] { w.opt->group(2); }, "group 2 does not exist");
}

// Memory given twice (a tied weight under two names, overlapping pieces, a param as a grad)
// would be updated twice per step with two states: refused naming both. Grads may share
// memory (they are only read).
TEST(HybridConstruction, OverlappingParamsAreRefusedNamingBoth) {
  Buffer a(DType::f32, false, 8), b(DType::f32, false, 8), g(DType::f32, false, 8);
  const auto whole = [](const Buffer& x) { return x.tensor(); };
  const auto part = [](const Buffer& x, std::int64_t from, std::int64_t n) {
    return kopt::Tensor(x.host.data() + from * 4, n, DType::f32);
  };
  struct Case {
    const char* what;
    std::vector<std::array<kopt::Tensor, 2>> params;  // (param, grad) as "p0", "p1"
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"tied", {{whole(a), whole(g)}, {whole(a), whole(b)}}, "parameter 'p0' overlaps 'p1'"},
      {"overlapping pieces", {{part(a, 0, 5), {}}, {part(a, 4, 4), {}}}, "'p0' overlaps 'p1'"},
      {"its own grad", {{whole(a), whole(a)}}, "parameter 'p0' overlaps the grad of 'p0'"},
      {"another's grad",
       {{whole(a), whole(g)}, {part(b, 0, 1), part(a, 7, 1)}},
       "parameter 'p0' overlaps the grad of 'p1'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    for (const bool two_groups : {false, true}) {
      std::vector<kopt::ParamGroup> groups(2);
      for (std::size_t j = 0; j < c.params.size(); ++j)
        groups[two_groups ? j : 0].add("p" + std::to_string(j), c.params[j][0], c.params[j][1]);
      expect_error<kopt::InvalidArgument>([&] { kopt::HybridOptimizer opt(groups); }, c.needle);
    }
  }
  // Adjacent params and one grad shared by two params are fine.
  std::vector<kopt::ParamGroup> fine(1);
  fine[0].add("p0", part(a, 0, 4), part(g, 0, 4)).add("p1", part(a, 4, 4), part(g, 0, 4));
  kopt::HybridOptimizer opt(fine);
  // rebind onto another param's memory, or a grad onto its own param: refused, and the old
  // memory stays bound.
  expect_error<kopt::InvalidArgument>([&] { opt.rebind("p1", part(a, 0, 4), part(b, 0, 4)); },
                                      "parameter 'p1' overlaps 'p0'");
  expect_error<kopt::InvalidArgument>([&] { opt.rebind("p1", part(b, 0, 4), part(a, 0, 4)); },
                                      "parameter 'p0' overlaps the grad of 'p1'");
  expect_error<kopt::InvalidArgument>([&] { opt.set_grad("p0", part(a, 0, 4)); },
                                      "parameter 'p0' overlaps the grad of 'p0'");
  EXPECT_NO_THROW(opt.rebind("p1", part(b, 0, 4), part(g, 0, 4)));
  EXPECT_NO_THROW(opt.step());
}

// A self-move empties the members: the optimizer is then moved-from, and refuses step()
// and save() (which would replace a good checkpoint with an empty one) with the reason.
TEST(HybridConstruction, SelfMoveAssignmentLeavesAMovedFromOptimizerThatSaysSo) {
  Buffer p(DType::f32, false, 4), g(DType::f32, false, 4);
  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", p.tensor(), g.tensor());
  kopt::HybridOptimizer opt(groups);
  TempDir dir;
  opt.save(dir.str("ckpt"));
  kopt::HybridOptimizer& same = opt;
  opt = std::move(same);
  expect_error<kopt::InvalidArgument>([&] { opt.step(); }, "moved from");
  expect_error<kopt::InvalidArgument>([&] { opt.save(dir.str("ckpt")); }, "moved from");
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { opt.set_grad("w", g.tensor()); }, [&] { opt.step_count("w"); },
           [&] { opt.group(0); }, [&] { opt.loss_scale(); }})
    expect_error<kopt::InvalidArgument>(call, "moved from");
  kopt::HybridOptimizer fresh(groups);
  EXPECT_NO_THROW(fresh.load(dir.str("ckpt")));  // the checkpoint is intact
}

// A loss scale below 1 can unscale a finite fp32 grad past fp32's range: the step is
// skipped, as torch's GradScaler skips it, not turned into NaN params.
TEST(HybridConstruction, AGradThatOverflowsOnceUnscaledSkipsTheStep) {
  Buffer p(DType::f32, false, 4), g(DType::f32, false, 4);
  p.set({1, 2, 3, 4});
  g.set({0, 0, 0, 1e37});
  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", p.tensor(), g.tensor());
  kopt::HybridOptimizer opt(groups,
                            {.loss_scaling = kopt::LossScalerOptions{.init_scale = 1.0 / 1024}});
  EXPECT_TRUE(opt.step().skipped);
  EXPECT_EQ(p.get(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(opt.step_count("w"), 0);
  EXPECT_EQ(opt.loss_scale(), 1.0 / 2048);
  g.set({0, 0, 0, 1e30});  // 2e33 unscaled: finite, a step
  EXPECT_FALSE(opt.step().skipped);
}

// The scale stays finite and > 0 whatever the run, so a checkpoint of it loads.
TEST(HybridConstruction, TheLossScaleStaysFiniteAndPositiveAndItsCheckpointLoads) {
  kopt::LossScaler down({.init_scale = 1e-300});
  for (int i = 0; i < 2000; ++i) down.update(false);
  EXPECT_GT(down.scale(), 0.0);
  kopt::LossScaler up({.init_scale = 1e300, .growth_factor = 1e10, .growth_interval = 1});
  for (int i = 0; i < 10; ++i) up.update(true);
  EXPECT_TRUE(std::isfinite(up.scale()));
  Buffer p(DType::f32, false, 4), g(DType::f32, false, 4);
  g.set({NAN, 0, 0, 0});
  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", p.tensor(), g.tensor());
  kopt::HybridOptimizer opt(groups, {.loss_scaling = kopt::LossScalerOptions{}});
  for (int i = 0; i < 1100; ++i) EXPECT_TRUE(opt.step().skipped);
  EXPECT_GT(opt.loss_scale(), 0.0);
  TempDir dir;
  opt.save(dir.str("ckpt"));
  kopt::HybridOptimizer loaded(groups, {.loss_scaling = kopt::LossScalerOptions{}});
  loaded.load(dir.str("ckpt"));
  EXPECT_EQ(loaded.loss_scale(), opt.loss_scale());
}

}  // namespace test_hybrid_bad_input
}  // namespace
