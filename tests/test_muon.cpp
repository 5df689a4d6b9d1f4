// Muon (kopt/muon_config.hpp) on the fused engine against its double-precision reference
// (tests/reference_algorithms.hpp: the momentum, the whole Newton-Schulz iteration, the
// shape's lr scale), on every enabled execution space, for every option, fp32, bf16 and f16
// params, and matrices square, tall, wide, 1 x n, n x 1, odd and empty; and the shapes it
// needs: kopt::Tensor::matrix, and the refusals of params without one.
#include <algorithm>
#include <cmath>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/kopt.hpp>

#include "reference_algorithms.hpp"
#include "shaped_case.hpp"

namespace {
namespace test_muon {

using namespace kopt_test;
using kopt::bfloat16;
using kopt::DType;
using kopt::float16;
using kopt::MuonConfig;
using kopt::Impl::MuonPolicy;

template <class Space>
class Muon : public ::testing::Test {};
TYPED_TEST_SUITE(Muon, EnabledSpaces, SpaceName);

// Square, tall, wide, a row, a column, odd sizes, one element, empty.
const std::vector<Shape> kShapes = {{32, 32}, {75, 18}, {18, 75}, {1, 40},
                                    {40, 1},  {33, 65}, {1, 1},   {0, 7}};

// The reference is an orthogonalization: U's singular values all go to about [0.7, 1.2]
// (the coefficients' fixed band), so X X^T (the smaller Gram matrix) is near the identity.
// Guards against the reference and kopt sharing a wrong formula.
void expect_near_orthogonal(const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
  const bool tall = rows > cols;
  const std::int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  const auto at = [&](std::int64_t i, std::int64_t j) {
    return tall ? x[static_cast<std::size_t>(j * cols + i)]
                : x[static_cast<std::size_t>(i * cols + j)];
  };
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < m; ++j) {
      double s = 0.0;
      for (std::int64_t k = 0; k < n; ++k) s += at(i, k) * at(j, k);
      if (i == j)
        EXPECT_TRUE(s > 0.45 && s < 1.45) << "diagonal " << i << ": " << s;
      else
        EXPECT_LT(std::abs(s), 0.35) << i << ", " << j;
    }
}

// The Newton-Schulz iteration alone (kopt::Impl::newton_schulz on KokkosBlas::gemm) against
// the double one. Its fp32 rounding errors are amplified by up to a^k (a = 3.4445) along
// directions of small singular value; measured (relative to O's RMS, 1/sqrt(max side)):
// 9.1e-7 at most (75 x 18, Serial and OpenMP), bound 1e-5. Wrong coefficients, a missing
// transpose for tall matrices or a norm of the wrong kind are errors of 1e-2 or more.
TYPED_TEST(Muon, NewtonSchulzMatchesDoubleReference) {
  using Space = TypeParam;
  std::mt19937 rng(7);
  const MuonConfig c;
  kopt::Impl::NewtonSchulzWork<Space> work;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.cols));
    const auto n = static_cast<std::size_t>(s.rows * s.cols);
    const std::vector<double> u = random_values(rng, n);
    SpaceArray<float, Space> x(n);
    for (std::size_t i = 0; i < n; ++i) x.host[i] = static_cast<float>(u[i]);
    x.upload();
    work.reserve("kopt_test", s.rows, s.cols);
    kopt::Impl::newton_schulz<Space>(x.view.data(), s.rows, s.cols,
                                     MuonPolicy::scalars(c, 1, 1.0).ns, work);
    const std::vector<double> want = reference_newton_schulz(u, s.rows, s.cols, c);
    const std::vector<double> got = widen(x.download());
    if (n > 1) expect_near_orthogonal(want, s.rows, s.cols);
    std::vector<double> ones(n, 1.0 / std::sqrt(static_cast<double>(std::max(s.rows, s.cols))));
    if (n > 0) {
      EXPECT_LT(error_relative_to(got, want, ones), 1e-5);
    }
  }
}

// Every switch of the config, one group each.
std::vector<MuonConfig> muon_configs() {
  return {
      MuonConfig{.lr = 2e-2},  // torch's defaults otherwise: Nesterov, decay 0.1
      MuonConfig{.lr = 1e-2, .weight_decay = 0.0, .momentum = 0.9, .nesterov = false},
      MuonConfig{.lr = 5e-3, .weight_decay = 0.05, .match_rms_adamw = true},
      MuonConfig{.lr = 1e-2, .ns_a = 2.0, .ns_b = -1.5, .ns_c = 0.5, .eps = 1e-3, .ns_steps = 3},
  };
}

template <class Space, class P, class G>
void check_against_reference(unsigned seed) {
  ShapedRun<Space, MuonPolicy, ReferenceMuon, P, G> run(muon_configs(), kShapes, seed,
                                                        "kopt_test::muon");
  run.run([&](std::size_t j, int step, const auto& state, const std::vector<double>& got) {
    if (got.empty()) return;
    // RMS error of the params: each step adds the iteration's error (above) times the
    // rate (lr s, at most 0.04 here) and the fp32 roundings of the update. Measured: 2.4e-8
    // after step 1, 3.0e-6 after step 120; bound 1e-7 + 2e-7 per step. A wrong lr scale,
    // a missing Nesterov look-ahead or decay are errors of 1e-3 after one step.
    std::vector<double> size(got.size(), 1.0);
    EXPECT_LT(error_relative_to(got, run.refs[j].param, size), 1e-7 + 2e-7 * step);
    EXPECT_LT(error_relative_to(to_host(state.arrays[0]), run.refs[j].momentum_buffer,
                                run.refs[j].momentum_buffer_size),
              1e-6);
  });
}

TEST(MuonConfig, KeepsTheArraysItsPolicyUpdates) {
  for (const MuonConfig& c : muon_configs()) {
    EXPECT_EQ(MuonPolicy::arrays_of(MuonPolicy::variant(c)), c.state_arrays());
    EXPECT_EQ(MuonPolicy::arrays_of(1), 0u);  // the second pass keeps no state
  }
  EXPECT_EQ(std::string(MuonPolicy::array_names[0]), "momentum_buffer");
  EXPECT_DOUBLE_EQ(MuonConfig{}.lr_scale(75, 18), std::sqrt(75.0 / 18.0));
  EXPECT_DOUBLE_EQ(MuonConfig{}.lr_scale(18, 75), 1.0);
  EXPECT_DOUBLE_EQ(MuonConfig{.match_rms_adamw = true}.lr_scale(18, 75), 0.2 * std::sqrt(75.0));
}

// workspace_bytes() counts what Muon keeps beside its momentum buffer (state_bytes()): the
// directions (4 bytes per element) and the Newton-Schulz scratch of its largest matrix (the
// next X, A and B, the row sums), so a training code can budget for both.
TYPED_TEST(Muon, WorkspaceBytesCountTheDirectionsAndTheIterationsScratch) {
  using Space = TypeParam;
  SpaceArray<float, Space> w(30 * 40), gw(30 * 40), v(64 * 16), gv(64 * 16);
  for (std::size_t i = 0; i < gw.size(); ++i) gw.host[i] = 0.01f * float(i % 13) - 0.05f;
  for (std::size_t i = 0; i < gv.size(); ++i) gv.host[i] = 0.02f * float(i % 7) - 0.05f;
  gw.upload(), gv.upload();
  kopt::FusedOptimizer<Space, MuonPolicy> opt(Space(), MuonConfig{}, "kopt_test::muon");
  opt.add("w", w.tensor().matrix(30, 40), gw.tensor());
  opt.add("v", v.tensor().matrix(64, 16), gv.tensor());
  EXPECT_EQ(opt.workspace_bytes(), 0u) << "nothing is allocated before the first step";
  opt.step();
  EXPECT_EQ(opt.state_bytes(), (1200u + 1024u) * sizeof(float));  // the momentum buffers
  const std::size_t directions = (1200u + 1024u) * sizeof(float);
  const std::size_t scratch = 1200 * sizeof(float)           // the next X of the largest
                              + 2 * 30 * 30 * sizeof(float)  // A and B: the larger k x k
                              + 64 * sizeof(double);         // the row sums of the tallest
  const std::size_t bytes = opt.workspace_bytes();
  EXPECT_GE(bytes, directions + scratch);
  EXPECT_LT(bytes, directions + scratch + 64 * 1024) << "only tables besides";
  opt.step();
  EXPECT_EQ(opt.workspace_bytes(), bytes) << "a steady step allocates nothing";
}

TYPED_TEST(Muon, MatchesReferenceForEveryOptionDtypeAndShape) {
  check_against_reference<TypeParam, float, float>(1);
  check_against_reference<TypeParam, bfloat16, bfloat16>(2);
  check_against_reference<TypeParam, float16, float>(3);
}

}  // namespace test_muon
}  // namespace
