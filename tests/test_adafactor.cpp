// Adafactor (kopt/adafactor_config.hpp) on the fused engine against its double-precision
// reference (tests/reference_algorithms.hpp: the factored statistics, the relative step,
// the RMS clipping), on every enabled execution space, for every option, fp32, bf16 and
// f16 params, matrices square, tall, wide, 1 x n, n x 1, odd, large and empty, and vectors
// (params without a shape: unfactored) of 1, odd and large sizes; and its per-param state.
#include <algorithm>
#include <cmath>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/kopt.hpp>

#include "reference_algorithms.hpp"
#include "shaped_case.hpp"

namespace {
namespace test_adafactor {

using namespace kopt_test;
using kopt::AdafactorConfig;
using kopt::bfloat16;
using kopt::float16;
using kopt::Impl::AdafactorPolicy;

template <class Space>
class Adafactor : public ::testing::Test {};
TYPED_TEST_SUITE(Adafactor, EnabledSpaces, SpaceName);

// Square, tall, wide, a row, a column, odd, large (columns and vector blocks cut across
// chunks), one element, empty; vectors of 1, odd and large sizes, and empty.
const std::vector<Shape> kShapes = {{32, 32},  {75, 18},     {18, 75}, {1, 40}, {40, 1},
                                    {33, 65},  {300, 700},   {1, 1},   {0, 7},  {-1, 1},
                                    {-1, 333}, {-1, 100003}, {-1, 0}};

// Every switch of the config, one group each.
std::vector<AdafactorConfig> adafactor_configs() {
  return {
      AdafactorConfig{},  // torch's defaults
      AdafactorConfig{.lr = 3e-2,
                      .beta2_decay = -0.5,
                      .eps1 = 1e-3,
                      .eps2 = 1e-2,
                      .d = 2.0,
                      .weight_decay = 0.1},
      AdafactorConfig{.lr = 1e-2, .weight_decay = 0.01, .maximize = true},
      AdafactorConfig{.lr = 5e-2, .beta2_decay = -0.9, .eps1 = 0.0, .d = 1.5},
  };
}

template <class Space, class P, class G>
void check_against_reference(unsigned seed) {
  ShapedRun<Space, AdafactorPolicy, ReferenceAdafactor, P, G> run(adafactor_configs(), kShapes,
                                                                  seed, "kopt_test::adafactor");
  run.run([&](std::size_t j, int step, const auto&, const std::vector<double>& got) {
    const std::vector<float> stats = run.opt.tensor_state(run.name(j));
    const std::vector<double> want_stats = run.refs[j].state();
    ASSERT_EQ(stats.size(), want_stats.size());
    if (got.empty()) return;
    // RMS error of the params: each step adds the fp32 roundings of the update, and the
    // rounding of 1 - lr weight_decay to fp32 (up to 3e-8 relative, the same every step:
    // torch's too) compounds. Measured: 2.5e-8 after step 1, 1.2e-6 after step 120 (the
    // groups with decay); bound 1e-7 + 2e-8 per step. A wrong relative step, clipping,
    // factoring or decay is an error of 1e-4 or more after one step.
    std::vector<double> size(got.size(), 1.0);
    EXPECT_LT(error_relative_to(got, run.refs[j].param, size), 1e-7 + 2e-8 * step);
    EXPECT_LT(error_relative_to(widen(stats), want_stats, want_stats), 1e-6);
  });
}

TYPED_TEST(Adafactor, MatchesReferenceForEveryOptionDtypeAndShape) {
  check_against_reference<TypeParam, float, float>(1);
  check_against_reference<TypeParam, bfloat16, bfloat16>(2);
  check_against_reference<TypeParam, float16, float>(3);
}

// The state is per param: rows + cols floats for a matrix (about 0 bytes per element),
// numel for a vector; set_tensor_state restores it (a checkpoint's path) and refuses a
// wrong size, changing nothing.
TYPED_TEST(Adafactor, StateIsFactoredAndRestores) {
  using Space = TypeParam;
  SpaceArray<float, Space> w(512 * 256), gw(512 * 256), b(300), gb(300);
  for (std::size_t i = 0; i < gw.size(); ++i) gw.host[i] = 0.01f * float(i % 97) - 0.4f;
  for (std::size_t i = 0; i < gb.size(); ++i) gb.host[i] = 0.02f * float(i % 31) - 0.3f;
  for (std::size_t i = 0; i < w.size(); ++i) w.host[i] = 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b.host[i] = -0.25f;
  w.upload(), gw.upload(), b.upload(), gb.upload();
  const auto run = [&](kopt::FusedOptimizer<Space, AdafactorPolicy>& opt) {
    opt.add("w", w.tensor().matrix(512, 256), gw.tensor());
    opt.add("b", b.tensor(), gb.tensor());
  };
  kopt::FusedOptimizer<Space, AdafactorPolicy> a(Space(), AdafactorConfig{}, "kopt_test::a");
  run(a);
  a.step();
  a.step();
  EXPECT_EQ(a.tensor_state("w").size(), 512u + 256u);
  EXPECT_EQ(a.tensor_state("b").size(), 300u);
  EXPECT_EQ(a.state_bytes(), (512u + 256u + 300u) * sizeof(float));
  // Beside it: the factors (rows + cols floats; a vector's numel + 1), each param's padded
  // to 16, and partial sums: a double per column per block of 16 rows (half a byte per
  // element here, 1/16 at 8192 rows), 16 per row; not a float per element.
  EXPECT_GE(a.workspace_bytes(), (768u + 304u) * sizeof(float) + w.size() / 2);
  EXPECT_LT(a.workspace_bytes(), 2 * w.size()) << "under 2 bytes per element";
  const std::vector<float> sw = a.tensor_state("w"), sb = a.tensor_state("b");
  EXPECT_GT(sw.front(), 0.0f);
  EXPECT_THROW(a.set_tensor_state("w", std::vector<float>(10)), kopt::InvalidArgument);
  EXPECT_EQ(a.tensor_state("w"), sw);
  a.step();
  const std::vector<float> after_a = w.download();

  // The same params from the same point in a second optimizer, state restored: same bits.
  w.host.assign(w.size(), 0.5f), b.host.assign(b.size(), -0.25f);
  w.upload(), b.upload();
  kopt::FusedOptimizer<Space, AdafactorPolicy> c(Space(), AdafactorConfig{}, "kopt_test::c");
  run(c);
  c.step();
  c.step();
  EXPECT_THROW(c.set_tensor_state("w", {}), kopt::InvalidArgument);  // nothing changes
  EXPECT_EQ(c.tensor_state("w"), sw);
  c.set_tensor_state("w", sw);
  c.set_tensor_state("b", sb);
  c.step();
  EXPECT_EQ(w.download(), after_a);
}

TEST(AdafactorConfig, KeepsNoElementwiseStateAndChecksItsFields) {
  for (const AdafactorConfig& c : adafactor_configs()) {
    EXPECT_EQ(AdafactorPolicy::arrays_of(AdafactorPolicy::variant(c)), c.state_arrays());
    EXPECT_NO_THROW(c.validate());
  }
  EXPECT_EQ(AdafactorPolicy::num_arrays, 0u);
  EXPECT_EQ(AdafactorConfig{}.eps1, std::ldexp(1.0, -23));  // torch's None for fp32
  EXPECT_THROW(AdafactorConfig{.beta2_decay = 0.5}.validate(), kopt::InvalidArgument);
  EXPECT_THROW(AdafactorConfig{.d = 0.5}.validate(), kopt::InvalidArgument);
  EXPECT_THROW(AdafactorConfig{.eps1 = -1.0}.validate(), kopt::InvalidArgument);
  EXPECT_THROW(AdafactorConfig{.eps2 = -1.0}.validate(), kopt::InvalidArgument);
  EXPECT_THROW(AdafactorConfig{.lr = -1.0}.validate(), kopt::InvalidArgument);
  EXPECT_THROW(AdafactorConfig{.weight_decay = std::nan("")}.validate(), kopt::InvalidArgument);
}

}  // namespace test_adafactor
}  // namespace
