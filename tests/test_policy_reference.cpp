// SGD, Lion, Adagrad, LAMB and Adafactor (on vectors) through the HybridOptimizer (local and
// offloaded groups) against double-precision references written from the equations in their config
// headers: every option, fp32 and bf16 params (a bf16 param's fp32 master is compared), odd sizes,
// with clipping on so the grad scale reaches the update. A wrong sign, a factor applied twice, a
// first step that starts a buffer wrongly or a decay of the wrong kind moves a param by far
// more than the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <kopt/kopt.hpp>
#include <random>
#include <variant>
#include <vector>

namespace {
namespace test_policy_reference {

// One param's reference state, in double.
struct Ref {
  std::vector<double> p, s;  // param, the (first) state array
  std::vector<double> s2;    // LAMB's second
  std::int64_t t = 0;
};

double sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

void reference_step(const kopt::SgdConfig& c, Ref& r, const std::vector<double>& grad) {
  ++r.t;
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    double g = (c.maximize ? -grad[i] : grad[i]) + c.weight_decay * r.p[i];
    if (c.momentum != 0) {
      r.s[i] = r.t == 1 ? g : c.momentum * r.s[i] + (1 - c.dampening) * g;
      g = c.nesterov ? g + c.momentum * r.s[i] : r.s[i];
    }
    r.p[i] -= c.lr * g;
  }
}

void reference_step(const kopt::LionConfig& c, Ref& r, const std::vector<double>& grad) {
  ++r.t;
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    const double g = c.maximize ? -grad[i] : grad[i];
    r.p[i] *= 1 - c.lr * c.weight_decay;
    r.p[i] -= c.lr * sign(c.beta1 * r.s[i] + (1 - c.beta1) * g);
    r.s[i] = c.beta2 * r.s[i] + (1 - c.beta2) * g;
  }
}

void reference_step(const kopt::AdagradConfig& c, Ref& r, const std::vector<double>& grad) {
  ++r.t;
  const double clr = c.lr / (1 + static_cast<double>(r.t - 1) * c.lr_decay);
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    const double g = (c.maximize ? -grad[i] : grad[i]) + c.weight_decay * r.p[i];
    if (r.t == 1) r.s[i] = c.initial_accumulator_value;
    r.s[i] += g * g;
    r.p[i] -= clr * g / (std::sqrt(r.s[i]) + c.eps);
  }
}

// LAMB: the trust ratio over the whole param (its three params here differ: 1031, 1031, 1).
void reference_step(const kopt::LambConfig& c, Ref& r, const std::vector<double>& grad) {
  ++r.t;
  r.s2.resize(r.p.size(), 0.0);
  const double bc1 = c.bias_correction ? 1 - std::pow(c.beta1, double(r.t)) : 1.0;
  const double bc2 = c.bias_correction ? 1 - std::pow(c.beta2, double(r.t)) : 1.0;
  std::vector<double> u(r.p.size());
  double pp = 0, uu = 0;
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    const double g =
        (c.maximize ? -grad[i] : grad[i]) + (c.decoupled ? 0 : c.weight_decay * r.p[i]);
    r.s[i] = c.beta1 * r.s[i] + (c.grad_averaging ? 1 - c.beta1 : 1.0) * g;
    r.s2[i] = c.beta2 * r.s2[i] + (1 - c.beta2) * g * g;
    u[i] = r.s[i] / bc1 / (std::sqrt(r.s2[i] / bc2) + c.eps) +
           (c.decoupled ? c.weight_decay * r.p[i] : 0);
    pp += r.p[i] * r.p[i];
    uu += u[i] * u[i];
  }
  double ratio = 1;
  if (c.trust_ratio && (c.weight_decay != 0 || c.always_adapt) && pp > 0 && uu > 0)
    ratio = std::sqrt(pp) / std::sqrt(uu);
  if (c.trust_ratio && (c.weight_decay != 0 || c.always_adapt) && c.clamp_trust)
    ratio = std::min(std::max(ratio, c.min_trust), c.max_trust);
  for (std::size_t i = 0; i < r.p.size(); ++i) r.p[i] -= c.lr * ratio * u[i];
}

// Adafactor on these vectors (no shape): its unfactored form, the whole variance in r.s
// (tests/test_adafactor.cpp checks the factored one, and its own reference, on matrices).
void reference_step(const kopt::AdafactorConfig& c, Ref& r, const std::vector<double>& grad) {
  ++r.t;
  const double beta = std::pow(double(r.t), c.beta2_decay);
  const double rho = std::min(c.lr, 1.0 / std::sqrt(double(r.t)));
  const double n = double(r.p.size());
  double pp = 0, uu = 0;
  for (const double p : r.p) pp += p * p;
  std::vector<double> u(r.p.size());
  for (std::size_t i = 0; i < r.p.size(); ++i) {
    const double g = c.maximize ? -grad[i] : grad[i];
    r.s[i] += beta * (g * g - r.s[i]);
    u[i] = g / std::sqrt(std::max(r.s[i], c.eps1 * c.eps1));
    uu += u[i] * u[i];
  }
  const double alpha = std::max(c.eps2, std::sqrt(pp / n)) * rho;
  const double clip = std::max(1.0, std::sqrt(uu / n) / c.d);
  for (std::size_t i = 0; i < r.p.size(); ++i)
    r.p[i] = r.p[i] * (1 - c.lr * c.weight_decay) - alpha / clip * u[i];
}

void reference_step(const kopt::AdamConfig&, Ref&, const std::vector<double>&) {}
// Muon's params are matrices, not these vectors: tests/test_muon.cpp has its reference.
void reference_step(const kopt::MuonConfig&, Ref&, const std::vector<double>&) {
  ADD_FAILURE() << "Muon is tested in tests/test_muon.cpp";
}

// Runs `steps` steps of `config` on an f32 and a bf16 param (sizes 1031 and 1), local or
// offloaded, with clipping to max_norm; compares params with the reference after each step.
void check(const kopt::AlgorithmConfig& config, bool offloaded, int steps, double bound) {
  const std::size_t n = 1031;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> w(n), dw(n), u(1), du(1);
  std::vector<kopt::bfloat16> v(n), dv(n);
  for (float& x : w) x = dist(rng);
  for (auto& x : v) x = kopt::bfloat16::from_float(dist(rng));
  u[0] = 0.5f;
  kopt::ParamGroup group(
      config, offloaded ? kopt::StatePlacement::host : kopt::StatePlacement::with_params);
  group.add("w", kopt::Tensor::from(w.data(), n), kopt::Tensor::from(dw.data(), n));
  group.add("v", kopt::Tensor::from(v.data(), n), kopt::Tensor::from(dv.data(), n));
  group.add("u", kopt::Tensor::from(u.data(), 1), kopt::Tensor::from(du.data(), 1));
  kopt::HybridOptions options;
  options.max_grad_norm = 20.0;  // the grads' norm is ~25-40: clipping is active
  kopt::HybridOptimizer opt({group}, options);
  std::vector<Ref> ref(3);
  ref[0].p.assign(w.begin(), w.end());
  for (const auto& x : v) ref[1].p.push_back(x.to_float());
  ref[2].p = {0.5};
  for (Ref& r : ref) r.s.assign(r.p.size(), 0.0);
  for (int s = 0; s < steps; ++s) {
    for (float& x : dw) x = dist(rng);
    for (auto& x : dv) x = kopt::bfloat16::from_float(dist(rng));
    du[0] = dist(rng);
    std::vector<std::vector<double>> g(3);
    g[0].assign(dw.begin(), dw.end());
    for (const auto& x : dv) g[1].push_back(x.to_float());
    g[2] = {du[0]};
    double sum = 0;
    for (const auto& gi : g)
      for (const double x : gi) sum += x * x;
    const double clip = std::min(1.0, 20.0 / (std::sqrt(sum) + 1e-6));
    for (std::size_t k = 0; k < 3; ++k) {
      for (double& x : g[k]) x *= clip;
      std::visit([&](const auto& c) { reference_step(c, ref[k], g[k]); }, config);
    }
    const kopt::StepStats st = opt.step();
    ASSERT_NEAR(st.clip_factor, clip, 1e-12);
    // fp32 params against the reference; the bf16 param within half a bf16 ulp of it (its
    // master is exact to the fp32 bound, and the param is the master rounded once).
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(w[i], ref[0].p[i], bound * (1 + std::abs(ref[0].p[i])))
          << kopt::algorithm_name(config) << " step " << s + 1 << " w[" << i << "]";
      ASSERT_NEAR(v[i].to_float(), ref[1].p[i],
                  (std::ldexp(1.0, -8) + bound) * std::abs(ref[1].p[i]) + bound)
          << kopt::algorithm_name(config) << " step " << s + 1 << " v[" << i << "]";
    }
    ASSERT_NEAR(u[0], ref[2].p[0], bound) << kopt::algorithm_name(config) << " step " << s + 1;
    ASSERT_EQ(opt.step_count("w"), s + 1);
  }
}

// fp32 state over 30 steps: a few float ulps of relative error per step.
constexpr double kBound = 2e-5;

TEST(PolicyReference, SgdEveryOption) {
  for (const bool offloaded : {false, true})
    for (const kopt::SgdConfig& c :
         {kopt::SgdConfig{.lr = 0.01}, kopt::SgdConfig{.lr = 0.01, .momentum = 0.9},
          kopt::SgdConfig{.lr = 0.01, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.05},
          kopt::SgdConfig{.lr = 0.02, .momentum = 0.9, .nesterov = true, .maximize = true},
          kopt::SgdConfig{.lr = 0.01, .weight_decay = 0.1, .maximize = true}})
      check(c, offloaded, 30, kBound);
}

TEST(PolicyReference, LionEveryOption) {
  // The sign makes an element whose interpolation is within rounding of 0 go either way; with
  // grads uniform in [-1, 1] that does not happen in 30 steps of these sizes (a test that
  // failed for it would show a w[i] off by 2 lr exactly).
  for (const bool offloaded : {false, true})
    for (const kopt::LionConfig& c :
         {kopt::LionConfig{}, kopt::LionConfig{.lr = 3e-4, .weight_decay = 0.5},
          kopt::LionConfig{.lr = 1e-3, .beta1 = 0.5, .beta2 = 0.9, .maximize = true}})
      check(c, offloaded, 30, kBound);
}

TEST(PolicyReference, AdagradEveryOption) {
  for (const bool offloaded : {false, true})
    for (const kopt::AdagradConfig& c :
         {kopt::AdagradConfig{},
          kopt::AdagradConfig{.lr = 0.05, .lr_decay = 0.1, .weight_decay = 0.01},
          kopt::AdagradConfig{.initial_accumulator_value = 0.5, .eps = 1e-6, .maximize = true}})
      check(c, offloaded, 30, kBound);
}

TEST(PolicyReference, AdafactorEveryOptionOnVectors) {
  // Local groups only: offloaded ones are refused (test_algorithms_bad_config).
  for (const kopt::AdafactorConfig& c :
       {kopt::AdafactorConfig{},
        kopt::AdafactorConfig{.lr = 0.05, .beta2_decay = -0.5, .eps2 = 0.1, .weight_decay = 0.1},
        kopt::AdafactorConfig{.eps1 = 1e-3, .d = 1.2, .maximize = true}})
    check(c, false, 30, kBound);
}

TEST(PolicyReference, LambEveryOption) {
  // Local groups only: offloaded ones are refused (test_bad_input).
  for (const kopt::LambConfig& c :
       {kopt::LambConfig{}, kopt::LambConfig{.lr = 0.01, .weight_decay = 0.0},
        kopt::LambConfig{.lr = 0.01, .weight_decay = 0.0, .always_adapt = true},
        kopt::LambConfig{.lr = 0.01,
        .weight_decay = 0.1,
        .decoupled = false,
        .grad_averaging = false,
        .clamp_trust = true,
        .min_trust = 0.2,
        .max_trust = 0.5,
        .maximize = true},
        kopt::LambConfig{.lr = 0.01, .trust_ratio = false}})
    check(c, false, 30, kBound);
}

}  // namespace test_policy_reference
}  // namespace
