// kopt issue 16: huge grads must not poison a param (an infinite second moment, a first
// moment whose g - m overflows), and error messages must not carry the build machine's paths
// nor a doubled "kopt: " prefix.
#include <kopt/kopt.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <kopt/adam_update.hpp>
#include <kopt/impl/copy_queue.hpp>
#include <kopt/kopt.hpp>
#include <map>
#include <string>

#include "adam_case.hpp"
#include "checkpoint_model.hpp"

namespace {
namespace test_update_edge_cases {

using namespace kopt_test;
using Space = Kokkos::DefaultHostExecutionSpace;

// torch's Adam/AdamW in double (as ReferenceAdam) with the one fp32 fact a huge grad brings
// in: the moments are stored in float, so one beyond the float range is inf, as in torch's
// fp32 state (beta2 * inf + ... stays inf, and m / inf makes the element's update 0).
struct Fp32StateReference {
  kopt::AdamConfig c;
  std::vector<double> param, m, v, vmax;
  std::int64_t step = 0;

  Fp32StateReference(const kopt::AdamConfig& config, std::vector<double> p)
      : c(config), param(std::move(p)), m(param.size()), v(param.size()), vmax(param.size()) {}

  static double stored(double x) { return std::abs(x) > FLT_MAX ? std::copysign(INFINITY, x) : x; }

  void update(const std::vector<double>& grad) {
    ++step;
    const double bc1 = 1.0 - std::pow(c.beta1, double(step));
    const double bc2 = 1.0 - std::pow(c.beta2, double(step));
    for (std::size_t i = 0; i < param.size(); ++i) {
      double g = grad[i];
      if (c.decoupled)
        param[i] *= 1.0 - c.lr * c.weight_decay;
      else
        g += c.weight_decay * param[i];
      m[i] = stored(c.beta1 * m[i] + (1.0 - c.beta1) * g);
      v[i] = stored(c.beta2 * v[i] + (1.0 - c.beta2) * g * g);
      double second = v[i];
      if (c.amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
      param[i] -= (c.lr / bc1) * m[i] / (std::sqrt(second) / std::sqrt(bc2) + c.eps);
    }
  }
};

// Relative error over the elements where `ref` is finite; where it is inf, `got` must be the
// same inf.
double relative_error_finite(const std::vector<double>& got, const std::vector<double>& ref) {
  std::vector<double> a, b;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i])) {
      a.push_back(got[i]);
      b.push_back(ref[i]);
    } else {
      EXPECT_EQ(got[i], ref[i]) << "element " << i;
    }
  }
  return relative_error(a, b);
}

constexpr int kSteps = 8;
constexpr std::size_t kSize = 1000;  // vector loop and its remainder both see huge grads

// Huge grads of element -> step (all other grads uniform in [-1, 1)):
// 1e20 and 2e20: g*g overflows float, but (1 - beta2) g g, torch's order, does not: v finite.
// -1e21: (1 - beta2) g^2 = 1e39 overflows in any order: v = inf for good, update ~0.
// -3.4e38 twice, then +3.4e38: g - m = 4.05e38 overflows; torch's 0.9 m + 0.1 g = -2.4e37
// does not (two steps down first: after one, 0.9 m + 0.1 g would cancel to a tenth of its
// terms, and so would its rounding errors, in torch's fp32 as in kopt's).
const std::map<std::pair<std::size_t, int>, float> kHuge = {
    {{3, 0}, 1e20f},     {{100, 0}, -1e21f}, {{517, 0}, -3.4e38f}, {{517, 1}, -3.4e38f},
    {{517, 2}, 3.4e38f}, {{998, 2}, 2e20f},  {{999, 3}, -1e21f},   {{640, kSteps - 1}, 1e21f}};

template <class P>
void check_huge_grads(const kopt::AdamConfig& config) {
  SCOPED_TRACE(std::string("param ") + kopt::name_of(kopt::dtype_of<P>()) +
               (config.decoupled ? ", AdamW" : ", Adam") + (config.amsgrad ? ", amsgrad" : ""));
  std::mt19937 rng(16);
  SpaceArray<P, Space> param(kSize);
  SpaceArray<float, Space> grad(kSize);
  fill_uniform(param.host, rng, -1.0f, 1.0f);
  param.upload();
  kopt::FusedAdam<Space> opt(Space(), config, "kopt::test_edge");
  opt.add("w", param.tensor(), grad.tensor());
  Fp32StateReference ref(config, widen(param.host));
  for (int s = 0; s < kSteps; ++s) {
    fill_uniform(grad.host, rng, -1.0f, 1.0f);
    for (const auto& [at, g] : kHuge)
      if (at.second == s) grad.host[at.first] = g;
    grad.upload();
    opt.step();
    ref.update(widen(grad.host));
  }
  Kokkos::fence();
  const std::vector<double> p = widen(param.download());
  for (std::size_t i = 0; i < kSize; ++i) ASSERT_TRUE(std::isfinite(p[i])) << "param " << i;
  EXPECT_LT(relative_error(p, ref.param), storage_bound<P>(kSteps));
  const auto state = opt.state("w");
  if constexpr (!std::is_same_v<P, float>) {
    EXPECT_LT(relative_error(to_host(state.master), ref.param), fp32_bound(kSteps));
  }
  EXPECT_LT(relative_error(to_host(state.exp_avg), ref.m), fp32_bound(kSteps));
  EXPECT_LT(relative_error_finite(to_host(state.exp_avg_sq), ref.v), fp32_bound(kSteps));
  if (config.amsgrad) {
    EXPECT_LT(relative_error_finite(to_host(state.max_exp_avg_sq), ref.vmax), fp32_bound(kSteps));
  }
  // The cases above really are the edge: infinite v where torch has it, finite where not.
  const std::vector<double> v = to_host(state.exp_avg_sq);
  EXPECT_TRUE(std::isinf(v[100]) && std::isinf(v[517]) && std::isinf(v[999]));
  EXPECT_TRUE(std::isfinite(v[3]) && std::isfinite(v[998]) && v[3] > 1e36);
}

template <class P>
void check_every_variant() {
  for (const bool amsgrad : {false, true}) {
    check_huge_grads<P>(kopt::AdamConfig{.amsgrad = amsgrad});  // AdamW
    check_huge_grads<P>(
        kopt::AdamConfig{.weight_decay = 0.1, .decoupled = false, .amsgrad = amsgrad});
  }
}

TEST(HugeGrads, Fp32ParamStaysFiniteAndMatchesTorchInFp32State) { check_every_variant<float>(); }

TEST(HugeGrads, Bf16ParamStaysFiniteAndMatchesTorchInFp32State) {
  check_every_variant<kopt::bfloat16>();
}

// The overflow fallbacks decide only elements that overflowed: a NaN grad still makes a NaN
// param (the loss scaler and the caller must see it), and inf grads give what torch gives.
TEST(HugeGrads, NanAndInfGradsStillPropagate) {
  const auto s = kopt::AdamStepScalars::make(kopt::AdamConfig{}, 1, 1.0);
  float m = 0.5f, v = 0.25f, vmax = 0.0f;
  EXPECT_TRUE(std::isnan(kopt::Impl::adam_update<false>(1.0f, NAN, m, v, vmax, s)));
  EXPECT_TRUE(std::isnan(m) && std::isnan(v));
  m = 0.5f, v = 0.25f;
  EXPECT_TRUE(std::isnan(kopt::Impl::adam_update<false>(1.0f, INFINITY, m, v, vmax, s)));
  EXPECT_TRUE(m == INFINITY && v == INFINITY);  // torch: inf / inf in the update, NaN
}

// AdamW's moments come from the grad alone, as torch's AdamW's do: a param that is NaN or inf
// stays so, but its moments are the bits a finite param gets (a term 0 * p in g spread NaN
// into both moments for good). Adam's L2 term p * weight_decay does spread it, as in torch.
// Every storage form, on the host: the fp32 loop, fp32 masters, remainders (the paired
// vector loop and its scalar tail) and no master, with fp32 and bf16 state arrays.
template <class P>
void check_moments_of_non_finite_params(const kopt::StateStorage& storage) {
  constexpr std::size_t n = 77;  // vectors of pairs and a scalar tail
  const std::size_t odd_ones[] = {5, 40, 41, 76};
  std::mt19937 rng(7);
  SpaceArray<P, Space> finite(n), poisoned(n);
  SpaceArray<float, Space> grad(n);
  fill_uniform(finite.host, rng, -1.0f, 1.0f);
  fill_uniform(grad.host, rng, -1.0f, 1.0f);
  poisoned.host = finite.host;
  for (const std::size_t i : odd_ones)
    poisoned.host[i] = kopt::Impl::from_float<P>(i % 2 == 0 ? NAN : -INFINITY);
  finite.upload();
  poisoned.upload();
  grad.upload();
  for (const bool decoupled : {true, false}) {
    SCOPED_TRACE(decoupled ? "AdamW" : "Adam");
    const kopt::AdamConfig c{.weight_decay = 0.1, .decoupled = decoupled};
    kopt::FusedAdam<Space> a(Space(), c, "kopt::test_finite", storage);
    kopt::FusedAdam<Space> b(Space(), c, "kopt::test_poisoned", storage);
    a.add("w", finite.tensor(), grad.tensor());
    b.add("w", poisoned.tensor(), grad.tensor());
    for (int step = 0; step < 3; ++step) {
      a.step();
      b.step();
    }
    Kokkos::fence();
    const auto sa = a.state("w"), sb = b.state("w");
    const std::vector<double> ma = to_host(sa.exp_avg), mb = to_host(sb.exp_avg);
    const std::vector<double> va = to_host(sa.exp_avg_sq), vb = to_host(sb.exp_avg_sq);
    const std::vector<double> pb = widen(poisoned.download());
    for (std::size_t i = 0; i < n; ++i) {
      const bool odd = std::find(std::begin(odd_ones), std::end(odd_ones), i) != std::end(odd_ones);
      if (!odd || decoupled) {
        ASSERT_EQ(mb[i], ma[i]) << "exp_avg " << i;
        ASSERT_EQ(vb[i], va[i]) << "exp_avg_sq " << i;
      } else {
        ASSERT_TRUE(std::isnan(mb[i]) && std::isnan(vb[i])) << "Adam's L2 term spreads it " << i;
      }
      ASSERT_EQ(std::isfinite(pb[i]), !odd) << "param " << i;
    }
  }
}

TEST(NonFiniteParams, AdamWMomentsComeFromTheGradAlone) {
  using kopt::DType;
  using kopt::MasterStorage;
  check_moments_of_non_finite_params<float>({});
  check_moments_of_non_finite_params<float>({.arrays = DType::bf16});
  check_moments_of_non_finite_params<kopt::bfloat16>({});
  for (const MasterStorage master : {MasterStorage::remainder, MasterStorage::none})
    for (const DType arrays : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(kopt::name_of(master) + std::string(", ") + kopt::name_of(arrays));
      check_moments_of_non_finite_params<kopt::bfloat16>({.master = master, .arrays = arrays});
    }
}

// ---- Error messages: no path of the build machine, one "kopt: " at most ----

// The source tree's root, from where this file sits (<root>/tests/...).
std::string source_root() {
  const std::string here = __FILE__;
  const auto cut = here.rfind("/tests/");
  return cut == std::string::npos ? here : here.substr(0, cut);
}

void expect_clean(const std::string& message, const std::string& needle) {
  SCOPED_TRACE(message);
  EXPECT_NE(message.find(needle), std::string::npos);
  EXPECT_EQ(message.rfind("kopt", 0), 0u) << "starts with what kopt is";
  for (const char* dir : {"/src/", "/include/", "/tests/", "/backends/"})
    EXPECT_EQ(message.find(dir), std::string::npos) << dir;
  const std::string root = source_root();  // "/work/main" on the machine that built this
  if (root.find('/') != std::string::npos) {
    EXPECT_EQ(message.find(root), std::string::npos) << root;
  }
  EXPECT_EQ(message.find("kopt: kopt"), std::string::npos);
  for (const char* inner : {" kopt: ", "(kopt: "})  // not "index.kopt: ", a file's name
    EXPECT_EQ(message.find(inner), std::string::npos) << "an inner prefix";
  // The tag names the file alone: "[name.cpp:123]" (or a header's, "[name.hpp:45]").
  const auto open = message.rfind('[');
  ASSERT_NE(open, std::string::npos);
  EXPECT_EQ(message.find('/', open), std::string::npos);
  std::size_t tags = 0;
  for (const char* t : {".cpp:", ".hpp:"})
    for (auto at = message.find(t); at != std::string::npos; at = message.find(t, at + 1)) {
      EXPECT_GT(at, open) << "the tag is the last bracket";
      ++tags;
    }
  EXPECT_EQ(tags, 1u) << "one location tag";
}

template <class E, class F>
void expect_clean_error(F&& bad, const std::string& needle) {
  try {
    bad();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    expect_clean(e.what(), needle);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(ErrorMessages, NameTheCallNotTheBuildTree) {
  expect_clean_error<kopt::InvalidArgument>([] { kopt::AdamConfig{.lr = -2}.validate(); },
                                            "AdamConfig.lr = -2");
  expect_clean_error<kopt::InvalidArgument>(
      [] { kopt::ParamGroup().add("w", kopt::Tensor(nullptr, 13, kopt::DType::f32)); },
      "ParamGroup::add: param of 'w'");

  std::vector<float> p(13, 0.5f), g(13, 0.25f);
  const kopt::Tensor param(p.data(), 13, kopt::DType::f32), grad(g.data(), 13, kopt::DType::f32);
  expect_clean_error<kopt::InvalidArgument>(
      [&] {
        std::vector<kopt::ParamGroup> groups(2);
        groups[0].add("w", param, grad);
        groups[1].add("w", param, grad);
        kopt::HybridOptimizer opt(std::move(groups));
      },
      "kopt::HybridOptimizer: parameter name 'w'");

  std::vector<kopt::ParamGroup> groups(1);
  groups[0].add("w", param, grad);
  kopt::HybridOptimizer opt(std::move(groups));
  expect_clean_error<kopt::InvalidArgument>([&] { opt.group(3); },
                                            "kopt::HybridOptimizer: group 3 does not exist");
  TempDir dir;
  expect_clean_error<kopt::CheckpointError>([&] { opt.load(dir.str("missing")); }, "missing");
  // Re-wrapped: the group's config error inside the optimizer's message.
  opt.group(0).config().lr = NAN;
  expect_clean_error<kopt::InvalidArgument>(
      [&] { opt.step(); }, "kopt::HybridOptimizer::step: group 0: AdamConfig.lr = nan");
  opt.group(0).config().lr = 1e-3;
  // The same through an engine's own group check.
  kopt::FusedAdam<Space> engine(Space(), kopt::AdamConfig{}, "kopt::test_edge");
  engine.add("w", param, grad);
  engine.config().beta2 = 1.5;
  expect_clean_error<kopt::InvalidArgument>([&] { engine.step(); },
                                            "kopt::test_edge: group 0: AdamConfig.beta2 = 1.5");
}

// A refused step quotes the failure that caused it, without that failure's own "kopt: ".
TEST(ErrorMessages, ARefusedStepQuotesItsCauseOnce) {
  kopt::HybridOptions options;
  options.offload.chunk_elements = 1024;
  CheckpointModel model({{0, kopt::DType::f32, kopt::DType::f32, true, 3000}}, {kopt::AdamConfig{}},
                        {0}, {0}, options, {true});
  model.train(0, 1);  // the first step's state is allocated before its update begins
  model.set_grads(1);
  kopt::Impl::set_host_copy_failure_after(0);
  expect_clean_error<kopt::BackendError>([&] { model.opt->step(); }, "offload copy failed");
  kopt::Impl::set_host_copy_failure_after(-1);
  expect_clean_error<kopt::InconsistentState>(
      [&] { model.opt->step(); },
      "kopt::HybridOptimizer::step: refused: a step failed after its update began (a host "
      "offload copy failed");
}

TEST(ErrorMessages, CApiLastErrorIsClean) {
  kopt_groups* groups = nullptr;
  ASSERT_EQ(kopt_groups_create(&groups), KOPT_OK);
  kopt_adam_config c;
  kopt_adam_config_default(&c);
  c.lr = -1;
  EXPECT_EQ(kopt_groups_add_group(groups, &c, 0, nullptr), KOPT_ERROR_INVALID_ARGUMENT);
  expect_clean(kopt_last_error(), "lr = -1");
  EXPECT_EQ(kopt_groups_add_group(nullptr, &c, 0, nullptr), KOPT_ERROR_INVALID_ARGUMENT);
  expect_clean(kopt_last_error(), "is NULL");
  kopt_groups_destroy(groups);
}

}  // namespace test_update_edge_cases
}  // namespace
