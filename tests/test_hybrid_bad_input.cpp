// Bad input to the HybridOptimizer: a clear kopt::Error, and nothing half-applied.
#include "hybrid_world.hpp"
#include "test_support.hpp"

namespace {

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

}  // namespace
