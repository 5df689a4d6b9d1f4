// The fused Adam/AdamW engine against the double-precision reference, on every enabled
// execution space, for every (param, grad) dtype pair and every config switch.
#include <KokkosBlas1_dot.hpp>

#include "adam_case.hpp"

namespace {
namespace test_fused_adam {

using namespace kopt_test;
using kopt::bfloat16;
using kopt::float16;

template <class Space>
class FusedAdamTest : public ::testing::Test {};
TYPED_TEST_SUITE(FusedAdamTest, EnabledSpaces, SpaceName);

constexpr std::size_t kChunk = 8192;  // >= both backends' chunk sizes

template <class Space, class P, class G>
void check_pair(int steps) {
  SCOPED_TRACE(std::string("param ") + kopt::name_of(kopt::dtype_of<P>()) + ", grad " +
               kopt::name_of(kopt::dtype_of<G>()));
  // Sizes 0, 1, 13, a non-multiple of the chunk size and several chunks, spread over the
  // five variant groups (so each group sees several sizes).
  const std::vector<std::size_t> sizes = {0, 1,          13,  kChunk + 7, 3 * kChunk + 1, 13, 1,
                                          0, kChunk - 1, 100, 257};
  AdamCase<Space, P, G> c(every_variant(), sizes);
  for (int s = 0; s < steps; ++s) c.step(s % 2 ? 0.5 : 1.0);
  c.expect_matches_reference(steps);
}

template <class Space, class P>
void check_param_type(int steps) {
  check_pair<Space, P, float>(steps);
  check_pair<Space, P, bfloat16>(steps);
  check_pair<Space, P, float16>(steps);
}

TYPED_TEST(FusedAdamTest, EveryDtypePairAndVariantMatchesReferenceAfterOneStep) {
  check_param_type<TypeParam, float>(1);
  check_param_type<TypeParam, bfloat16>(1);
  check_param_type<TypeParam, float16>(1);
}

TYPED_TEST(FusedAdamTest, EveryDtypePairAndVariantMatchesReferenceAfterTenSteps) {
  check_param_type<TypeParam, float>(10);
  check_param_type<TypeParam, bfloat16>(10);
  check_param_type<TypeParam, float16>(10);
}

TYPED_TEST(FusedAdamTest, ThousandStepsStayWellUnder1e5Fp32) {
  AdamCase<TypeParam, float, float> c(every_variant(), {1, 13, 1000, 4099, 13});
  for (int s = 0; s < 1000; ++s) c.step();
  c.expect_matches_reference(1000);
  EXPECT_LT(fp32_bound(1000), 2e-6);  // the bound itself is well under 1e-5
}

TYPED_TEST(FusedAdamTest, ThousandStepsBf16WithMasterAndFp16Grads) {
  AdamCase<TypeParam, bfloat16, float16> c(every_variant(), {1, 13, 1000, 4099});
  for (int s = 0; s < 1000; ++s) c.step();
  c.expect_matches_reference(1000);
}

TYPED_TEST(FusedAdamTest, ThousandTensorsOfMixedSizes) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::size_t> size(0, 3000);
  std::vector<std::size_t> sizes(1000);
  for (auto& s : sizes) s = size(rng);
  sizes[17] = 0;
  sizes[18] = 1;
  AdamCase<TypeParam, bfloat16, float> c(every_variant(), sizes);
  for (int s = 0; s < 10; ++s) c.step();
  c.expect_matches_reference(10);
}

TYPED_TEST(FusedAdamTest, ParamWithoutGradIsSkippedAndItsStateUntouched) {
  AdamCase<TypeParam, float, float> c({kopt::AdamConfig{}}, {13, 29});
  c.step();
  const std::string frozen = c.name(1);
  const std::vector<double> m_before = to_host(c.opt.state(frozen).exp_avg);
  const std::vector<float> p_before = c.params[1]->download();
  c.opt.set_grad(frozen, kopt::Tensor{});
  // Step only param 0 in the reference too.
  fill_uniform(c.grads[0]->host, c.rng, -1.0f, 1.0f);
  c.grads[0]->upload();
  c.opt.step();
  c.refs[0].update(widen(c.grads[0]->host));
  EXPECT_EQ(c.opt.step_count(frozen), 1);
  EXPECT_EQ(c.opt.step_count(c.name(0)), 2);
  EXPECT_EQ(to_host(c.opt.state(frozen).exp_avg), m_before);
  EXPECT_EQ(c.params[1]->download(), p_before);
  // The frozen param resumes with its own step count (bias correction of step 2).
  c.opt.set_grad(frozen, c.grads[1]->tensor());
  c.step();
  EXPECT_EQ(c.opt.step_count(frozen), 2);
  EXPECT_LT(relative_error(widen(c.params[0]->download()), c.refs[0].param), fp32_bound(3));
}

TYPED_TEST(FusedAdamTest, ConfigChangedBetweenStepsIsUsedByTheNextStep) {
  AdamCase<TypeParam, float16, float> c(every_variant(), {13, 500, 1, 77, 9000});
  for (int s = 0; s < 20; ++s) {
    for (std::size_t g = 0; g < c.configs.size(); ++g) {  // a decaying lr, and a toggled amsgrad
      c.opt.config(g).lr = c.configs[g].lr * (1.0 - 0.04 * s);
      if (g == 4) c.opt.config(g).amsgrad = s >= 10;
    }
    for (std::size_t j = 0; j < c.refs.size(); ++j) c.refs[j].config = c.opt.config(c.group_of[j]);
    c.step();
  }
  c.configs = {c.opt.config(0), c.opt.config(1), c.opt.config(2), c.opt.config(3), c.opt.config(4)};
  c.expect_matches_reference(20);
}

TYPED_TEST(FusedAdamTest, ReloadModelParamsRefreshesEveryMaster) {
  AdamCase<TypeParam, bfloat16, float> c({kopt::AdamConfig{}}, {13, 8200});
  for (int s = 0; s < 3; ++s) c.step();
  // A model-only checkpoint load: new weights in the params, then reload. Where a new weight
  // happens to equal the old one, the master already rounds to it and is kept as it is.
  for (std::size_t j = 0; j < c.params.size(); ++j) {
    const std::vector<double> master = to_host(c.opt.state(c.name(j)).master);
    const std::vector<bfloat16> old = c.params[j]->download();
    fill_uniform(c.params[j]->host, c.rng, -2.0f, 2.0f);
    c.params[j]->upload();
    c.refs[j].param = widen(c.params[j]->host);
    for (std::size_t i = 0; i < old.size(); ++i)
      if (old[i].bits == c.params[j]->host[i].bits) c.refs[j].param[i] = master[i];
  }
  c.opt.reload_model_params();
  c.step();
  c.expect_matches_reference(4);
}

// The grad-norm reduction against an independent one: Kokkos Kernels' dot(g, g) over the
// same memory (fp32 grads; KokkosBlas accumulates in float, hence the 1e-5).
TYPED_TEST(FusedAdamTest, GradSumOfSquaresMatchesKokkosBlasDot) {
  const std::vector<std::size_t> sizes = {0, 1, 13, 8199, 40000};
  AdamCase<TypeParam, kopt::bfloat16, float> c({kopt::AdamConfig{}}, sizes);
  for (auto& g : c.grads) {
    fill_uniform(g->host, c.rng, -3.0f, 3.0f);
    g->upload();
  }
  double blas = 0.0;
  for (auto& g : c.grads) blas += KokkosBlas::dot(g->view, g->view);
  const double ours = c.opt.grad_sum_of_squares();
  EXPECT_NEAR(ours, blas, 1e-5 * blas);
  double exact = 0.0;  // and in double on the host, which it must match to 1e-12
  for (auto& g : c.grads)
    for (float x : g->host) exact += double(x) * x;
  EXPECT_NEAR(ours, exact, 1e-12 * exact);
  c.opt.set_grad(c.name(4), kopt::Tensor{});  // an absent grad is left out
  EXPECT_LT(c.opt.grad_sum_of_squares(), 0.5 * exact);
}

}  // namespace test_fused_adam
}  // namespace
