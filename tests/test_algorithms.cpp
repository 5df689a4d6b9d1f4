// SGD, Lion, Adagrad and LAMB on the fused engine against their double-precision references
// (tests/reference_algorithms.hpp), on every enabled execution space, for every option, for
// fp32, bf16 and f16 params, and sizes 0, 1, odd and several chunks.
#include <cfloat>

#include "algorithm_case.hpp"

namespace {
namespace test_algorithms {

using namespace kopt_test;
using kopt::bfloat16;
using kopt::float16;
using kopt::Impl::AdagradPolicy;
using kopt::Impl::AdamPolicy;
using kopt::Impl::LambPolicy;
using kopt::Impl::LionPolicy;
using kopt::Impl::SgdPolicy;

template <class Space>
class Algorithms : public ::testing::Test {};
TYPED_TEST_SUITE(Algorithms, EnabledSpaces, SpaceName);

// Every switch of each config, one group each.
std::vector<kopt::SgdConfig> sgd_configs() {
  return {
      kopt::SgdConfig{.lr = 0.05},                   // plain: no state
      kopt::SgdConfig{.lr = 0.02, .momentum = 0.9},  // heavy ball
      kopt::SgdConfig{.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
      kopt::SgdConfig{
          .lr = 0.03, .momentum = 0.5, .dampening = 0.3, .weight_decay = 0.05, .maximize = true},
      kopt::SgdConfig{.lr = 0.1, .weight_decay = 0.1, .maximize = true},  // no state, decay
  };
}
std::vector<kopt::LionConfig> lion_configs() {
  return {
      kopt::LionConfig{},  // the paper's defaults
      kopt::LionConfig{.lr = 3e-4, .beta1 = 0.95, .beta2 = 0.98, .weight_decay = 0.1},
      kopt::LionConfig{
          .lr = 1e-3, .beta1 = 0.8, .beta2 = 0.9, .weight_decay = 1.0, .maximize = true},
      kopt::LionConfig{.lr = 5e-4, .beta1 = 1.0, .beta2 = 0.9, .weight_decay = 0.05},  // sign(m)
      kopt::LionConfig{.lr = 2e-4, .beta1 = 0.0, .beta2 = 0.99},  // signSGD (exp_avg unread)
  };
}
std::vector<kopt::AdagradConfig> adagrad_configs() {
  return {
      kopt::AdagradConfig{},  // torch's defaults
      kopt::AdagradConfig{.lr = 0.05, .lr_decay = 0.01},
      kopt::AdagradConfig{.lr = 0.02, .weight_decay = 0.1, .initial_accumulator_value = 0.5},
      kopt::AdagradConfig{.lr = 0.01,
                          .lr_decay = 0.1,
                          .weight_decay = 0.01,
                          .initial_accumulator_value = 0.1,
                          .eps = 1e-3,
                          .maximize = true},
  };
}

std::vector<kopt::LambConfig> lamb_configs() {
  return {
      kopt::LambConfig{},                                 // apex's defaults: decay, adapts
      kopt::LambConfig{.lr = 2e-3, .weight_decay = 0.0},  // no decay: r = 1 (apex's rule)
      kopt::LambConfig{.weight_decay = 0.0, .always_adapt = true},  // use_nvlamb
      kopt::LambConfig{.lr = 5e-3,
                       .beta1 = 0.8,
                       .beta2 = 0.99,
                       .eps = 1e-8,
                       .weight_decay = 0.1,
                       .decoupled = false,
                       .bias_correction = false,
                       .grad_averaging = false,
                       .clamp_trust = true,
                       .min_trust = 0.8,  // above most params' ratios (~0.6): clamps
                       .max_trust = 2.0,
                       .maximize = true},
      kopt::LambConfig{.lr = 1e-3, .trust_ratio = false},  // excluded (biases, norms)
  };
}

// Each group gets sizes 1 and 1031 (odd); group `large` 100003 (more than 12 chunks of
// every backend) and group 0 an empty param too.
struct Layout {
  std::vector<std::size_t> sizes, groups;
  std::int64_t elements = 0;
  Layout(std::size_t num_groups, std::size_t large) {
    for (std::size_t g = 0; g < num_groups; ++g) add(1, g), add(1031, g);
    add(100003, large % num_groups);
    add(0, 0);
  }
  void add(std::size_t n, std::size_t g) {
    sizes.push_back(n);
    groups.push_back(g);
    elements += static_cast<std::int64_t>(n);
  }
};

// Norm-wise error bound after `steps` steps with fp32 state, relative to the magnitudes the
// errors scale with (params: the largest |p| of each element's trajectory; states: see
// state_size()). Each step rounds each element a few times, each by at most half an ulp
// (eps / 2 relative), and the float-rounded scalars (lr, momentum, ...) add ~ 3e-8. With a
// small lr these roundings are coherent from step to step (p - lr rounds the same way for
// every p of a binade), so the error may grow linearly: the bound allows one ulp plus a
// quarter ulp per step (1.5e-7 after one step, 1.8e-7 after two, 6.1e-6 after 200).
// Measured, worst param or state of any size: 5.2e-8, 7.8e-8 and 1.4e-6 (Lion at lr 1e-4,
// the coherent case; the others stay below 4.2e-7). An error of the math (dampening at the
// first step, lr_decay at t instead of t - 1, eps inside the square root, a missing Nesterov
// look-ahead) is 1e-5 or more after one or two steps and grows from there.
double fp32_tolerance(int steps) { return FLT_EPSILON * (1.0 + steps / 4.0); }

template <class Space, class Policy, class P, class G>
void check_against_reference(const std::vector<typename Policy::Config>& configs, unsigned seed) {
  SCOPED_TRACE(std::string(Policy::name) + ": param " + kopt::name_of(kopt::dtype_of<P>()) +
               ", grad " + kopt::name_of(kopt::dtype_of<G>()));
  const Layout layout(configs.size(), seed);  // each dtype: the large param in another group
  AlgorithmCase<Space, Policy, P, G> c(configs, layout.sizes, layout.groups, seed);
  for (int s = 1; s <= 200; ++s) {
    c.step(s % 3 == 0 ? 0.5 : 1.0);      // grad_scale: unscaling and clipping pass through it
    if (s == 1 || s == 2 || s == 200) {  // the first steps: buffers and sums as torch starts them
      SCOPED_TRACE("after step " + std::to_string(s));
      c.expect_matches_reference(fp32_tolerance(s), fp32_tolerance(s));
    }
    if (::testing::Test::HasFailure()) return;
  }
  if constexpr (AlgorithmCase<Space, Policy, P, G>::kIsLion) {
    // Every element-step's sign was checked; kopt decided it (inside the band) in a small
    // fraction of them, and took the other sign than double in fewer still. Measured: 2e-4
    // to 4.6e-4 inside the band, 0 to 12 of 2.1e7 disagreeing, all of those with
    // |interpolation| < 1.4e-7 of its terms (the band is 1e-4: a margin of 700).
    const LionSigns& s = c.signs;
    EXPECT_EQ(s.element_steps, 200 * layout.elements);
    EXPECT_LT(s.uncertain, s.element_steps / 500) << "the band is too wide to test the sign";
    EXPECT_LE(s.disagreements, s.uncertain);
    EXPECT_LT(s.disagreements, s.element_steps / 100000);
  }
}

template <class Space, class Policy>
void check_every_dtype(const std::vector<typename Policy::Config>& configs) {
  check_against_reference<Space, Policy, float, float>(configs, 1);
  check_against_reference<Space, Policy, bfloat16, bfloat16>(configs, 2);
  check_against_reference<Space, Policy, float16, float>(configs, 3);
}

TYPED_TEST(Algorithms, SgdMatchesReferenceForEveryOptionDtypeAndSize) {
  check_every_dtype<TypeParam, SgdPolicy>(sgd_configs());
}

TYPED_TEST(Algorithms, LionMatchesReferenceForEveryOptionDtypeAndSize) {
  check_every_dtype<TypeParam, LionPolicy>(lion_configs());
}

TYPED_TEST(Algorithms, AdagradMatchesReferenceForEveryOptionDtypeAndSize) {
  check_every_dtype<TypeParam, AdagradPolicy>(adagrad_configs());
}

// sign(0) is 0: a zero interpolation (zero grads, zero exp_avg; -0 too) leaves the param
// where decay alone takes it, here nowhere.
TYPED_TEST(Algorithms, LambMatchesReferenceForEveryOptionDtypeAndSize) {
  check_every_dtype<TypeParam, LambPolicy>(lamb_configs());
}

TYPED_TEST(Algorithms, LionZeroInterpolationDoesNotMoveTheParam) {
  kopt::FusedOptimizer<TypeParam, LionPolicy> opt(TypeParam(), kopt::LionConfig{.lr = 0.1});
  SpaceArray<float, TypeParam> p(64), g(64);
  std::mt19937 rng(5);
  fill_quick(p.host, rng);
  p.upload();
  for (std::size_t i = 0; i < g.size(); ++i) g.host[i] = i % 2 ? -0.0f : 0.0f;
  g.upload();
  const std::vector<float> before = p.host;
  opt.add("w", p.tensor(), g.tensor());
  opt.step();
  EXPECT_EQ(p.download(), before);
  EXPECT_EQ(to_host(opt.state("w").arrays[0]), std::vector<double>(64, 0.0));
}

// SGD without momentum keeps no state at all: no buffer, no bytes for fp32 params.
TYPED_TEST(Algorithms, PlainSgdKeepsNoState) {
  AlgorithmCase<TypeParam, SgdPolicy, float, float> c({kopt::SgdConfig{.lr = 0.1}}, {1031, 7},
                                                      {0, 0}, 9);
  c.step(1.0);
  EXPECT_EQ(c.opt.state_bytes(), 0u);
  EXPECT_EQ(c.opt.state(c.name(0)).arrays[0].extent(0), 0u);
  c.expect_matches_reference(fp32_tolerance(1), fp32_tolerance(1));
}

// For every config variant: the arrays a config says it keeps are the ones its policy
// variant keeps (the engine allocates by the one, the checkpoint records the other), and
// every variant of every policy is reached by some config.
template <class Policy>
void expect_arrays_agree(const std::vector<typename Policy::Config>& configs) {
  SCOPED_TRACE(Policy::name);
  std::vector<bool> reached(Policy::num_variants, false);
  for (const auto& c : configs) {
    const int v = Policy::variant(c);
    ASSERT_GE(v, 0);
    ASSERT_LT(v, Policy::num_variants);
    reached[static_cast<std::size_t>(v)] = true;
    EXPECT_EQ(c.state_arrays(), Policy::arrays_of(v)) << "variant " << v;
    EXPECT_EQ(kopt::Impl::arrays_of(kopt::AlgorithmConfig(c)), c.state_arrays());
    EXPECT_EQ(Policy::arrays_of(v) >> Policy::num_arrays, 0u) << "an array the policy lacks";
  }
  for (int v = 0; v < Policy::num_variants; ++v) EXPECT_TRUE(reached[v]) << "variant " << v;
}

TEST(AlgorithmsStateArrays, ConfigStateArraysEqualThePolicyVariantArrays) {
  expect_arrays_agree<AdamPolicy>({kopt::AdamConfig{}, kopt::AdamConfig{.amsgrad = true},
                                   kopt::AdamConfig{.decoupled = false, .maximize = true}});
  expect_arrays_agree<SgdPolicy>(sgd_configs());
  expect_arrays_agree<LionPolicy>(lion_configs());
  expect_arrays_agree<AdagradPolicy>(adagrad_configs());
  expect_arrays_agree<LambPolicy>(lamb_configs());
  // And what each keeps, by name: torch's state_dict entries.
  EXPECT_EQ(kopt::SgdConfig{}.state_arrays(), 0u);
  EXPECT_EQ((kopt::SgdConfig{.momentum = 0.1}.state_arrays()), 1u);
  EXPECT_EQ(kopt::LionConfig{}.state_arrays(), 1u);
  EXPECT_EQ(kopt::AdagradConfig{}.state_arrays(), 1u);
  EXPECT_EQ(std::string(SgdPolicy::array_names[0]), "momentum_buffer");
  EXPECT_EQ(std::string(LionPolicy::array_names[0]), "exp_avg");
  EXPECT_EQ(std::string(AdagradPolicy::array_names[0]), "sum");
  EXPECT_EQ(kopt::LambConfig{}.state_arrays(), 3u);
  EXPECT_EQ(std::string(LambPolicy::array_names[1]), "exp_avg_sq");
}

}  // namespace test_algorithms
}  // namespace
