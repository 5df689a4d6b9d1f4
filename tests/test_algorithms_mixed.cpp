// One optimizer running AdamW, SGD (Nesterov momentum), Lion and Adagrad side by side, some
// groups offloaded, with clipping on: every group matches its own double reference under
// ONE global grad norm taken over all groups' grads.
#include <cfloat>
#include <variant>

#include "algorithm_world.hpp"
#include "lion_signs.hpp"
#include "reference_adam.hpp"
#include "reference_algorithms.hpp"

namespace {
namespace test_algorithms_mixed {

using namespace kopt_test;
using kopt::DType;

using AnyReference = std::variant<ReferenceAdam, ReferenceSgd, ReferenceLion, ReferenceAdagrad>;

AnyReference make_reference(const kopt::AlgorithmConfig& c, std::vector<double> p) {
  if (const auto* adam = std::get_if<kopt::AdamConfig>(&c)) return ReferenceAdam(*adam, p);
  if (const auto* sgd = std::get_if<kopt::SgdConfig>(&c)) return ReferenceSgd(*sgd, p);
  if (const auto* lion = std::get_if<kopt::LionConfig>(&c)) return ReferenceLion(*lion, p);
  return ReferenceAdagrad(std::get<kopt::AdagradConfig>(c), p);
}

const std::vector<double>& param_of(const AnyReference& r) {
  return std::visit([](const auto& x) -> const std::vector<double>& { return x.param; }, r);
}

// The reference's state array 0 (SGD, Lion, Adagrad) and the magnitudes its errors scale
// with; null for Adam (its state is covered by the Adam suites).
std::pair<const std::vector<double>*, const std::vector<double>*> state_of(const AnyReference& r) {
  if (const auto* s = std::get_if<ReferenceSgd>(&r))
    return {&s->momentum_buffer, &s->momentum_buffer_size};
  if (const auto* l = std::get_if<ReferenceLion>(&r)) return {&l->exp_avg, &l->exp_avg_size};
  if (const auto* a = std::get_if<ReferenceAdagrad>(&r)) return {&a->sum, &a->sum};
  return {nullptr, nullptr};
}

std::vector<double> floats_of(const std::vector<std::uint32_t>& bits) {
  std::vector<double> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = kopt::Impl::bits_float(bits[i]);
  return v;
}

TEST(AlgorithmsMixed, EveryGroupMatchesItsReferenceUnderOneGlobalClip) {
  const std::vector<kopt::AlgorithmConfig> configs = {
      kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.05},
      kopt::SgdConfig{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
      kopt::LionConfig{.lr = 1e-3, .weight_decay = 0.1},
      kopt::AdagradConfig{.lr = 0.05, .initial_accumulator_value = 0.1}};
  // Lion's params are f32: the direction it took is read back from them (lion_signs.hpp).
  const std::vector<ParamDef> defs = {ParamDef{0, DType::f32, DType::f32, false, 1031},
                                      ParamDef{0, DType::bf16, DType::f32, false, 100},
                                      ParamDef{1, DType::f32, DType::f32, false, 2000},
                                      ParamDef{1, DType::f16, DType::f16, false, 333},
                                      ParamDef{2, DType::f32, DType::bf16, false, 1500},
                                      ParamDef{2, DType::f32, DType::f32, false, 7},
                                      ParamDef{3, DType::bf16, DType::f32, false, 800},
                                      ParamDef{3, DType::f32, DType::f32, false, 4099}};
  kopt::HybridOptions options;
  options.max_grad_norm = 1.0;
  AlgorithmWorld w(configs, defs, options, 8,
                   {false, true, false, true});  // SGD, Adagrad offloaded
  std::vector<AnyReference> refs;
  std::vector<std::vector<double>> size;  // per element, the largest |param| so far
  for (std::size_t j = 0; j < defs.size(); ++j) {
    refs.push_back(make_reference(configs[defs[j].group], w.params[j].get()));
    size.push_back(w.params[j].get());
    for (double& x : size[j]) x = std::abs(x);
  }
  LionSigns signs;
  // Per group, grads of about the same norm (amplitude ~ 1 / sqrt(elements))...
  const double group_amp[] = {1.5, 1.0, 1.3, 0.7};
  for (int s = 0; s < 20; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    // ...times 1, 2 or 3, each group another from step to step: no group dominates the
    // global norm, so clipping a group by its own norm would give it another factor than
    // the global one (by 29% or more), at every step.
    std::vector<double> amp;
    for (const ParamDef& d : defs) amp.push_back(group_amp[d.group] * (1 + (s + d.group) % 3));
    w.set_grads(s, 1.0, amp);
    const std::vector<std::vector<double>> before = w.all_params();
    const kopt::StepStats stats = w.opt->step();
    double sum_sq = 0, group_sq[4] = {0, 0, 0, 0};
    for (std::size_t j = 0; j < defs.size(); ++j)
      for (const double g : w.last_grads[j]) sum_sq += g * g, group_sq[defs[j].group] += g * g;
    const double norm = std::sqrt(sum_sq), clip = std::min(1.0, 1.0 / (norm + 1e-6));
    EXPECT_NEAR(stats.grad_norm, norm, 1e-12 * norm);
    EXPECT_NEAR(stats.clip_factor, clip, 1e-12 * clip);
    for (const double sq : group_sq)  // the test tells a global clip from per-group ones
      EXPECT_GT(std::abs(std::min(1.0, 1.0 / (std::sqrt(sq) + 1e-6)) / clip - 1.0), 0.2);
    for (std::size_t j = 0; j < defs.size(); ++j) {
      if (auto* lion = std::get_if<ReferenceLion>(&refs[j])) {
        const std::vector<double> dirs = lion_directions(*lion, w.last_grads[j], clip, before[j],
                                                         w.params[j].get(), signs, w.name(j));
        lion->update(w.last_grads[j], clip, &dirs);
      } else {
        std::visit([&](auto& r) { r.update(w.last_grads[j], clip); }, refs[j]);
      }
      for (std::size_t i = 0; i < size[j].size(); ++i)
        size[j][i] = std::max(size[j][i], std::abs(param_of(refs[j])[i]));
    }
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(signs.element_steps, 20 * 1507);
  EXPECT_LT(signs.uncertain, signs.element_steps / 500);
  // fp32 after 20 steps (test_algorithms.cpp: one ulp and a quarter per step, 7.2e-7;
  // measured <= 1.3e-7; clipping each group by its own norm gives 1e-2 and more); a 16-bit
  // param is its master rounded once.
  const double tol = FLT_EPSILON * (1.0 + 20 / 4.0);
  const auto saved = saved_params(*w.opt);
  for (std::size_t j = 0; j < defs.size(); ++j) {
    SCOPED_TRACE(w.name(j) + " (group " + std::to_string(defs[j].group) + ", " +
                 kopt::name_of(defs[j].param) + ")");
    const SavedParam& s = saved.at(w.name(j));
    EXPECT_EQ(s.step, 20);
    const std::vector<double> p = w.params[j].get();
    const std::vector<double> fp32 = s.has_master ? floats_of(s.values.back()) : p;
    EXPECT_LT(error_relative_to(fp32, param_of(refs[j]), size[j]), tol);
    for (std::size_t i = 0; i < p.size() && s.has_master; ++i) {
      const float m = static_cast<float>(fp32[i]);
      const float rounded = defs[j].param == DType::bf16 ? kopt::bfloat16::from_float(m).to_float()
                                                         : kopt::float16::from_float(m).to_float();
      ASSERT_EQ(p[i], rounded) << i;
    }
    const auto [ref_state, ref_size] = state_of(refs[j]);
    if (ref_state != nullptr) {
      ASSERT_EQ(s.arrays, 1u);
      EXPECT_LT(error_relative_to(floats_of(s.values[0]), *ref_state, *ref_size), tol);
    }
  }
}

}  // namespace test_algorithms_mixed
}  // namespace
