#pragma once
// One step of each algorithm's double-precision reference, started from a state read back
// from kopt (for tests that check kopt step by step, whatever form it stores its state in):
// step(t, p, g, s, uncertain) takes the param p (or its master) and the policy's arrays s
// before step t, and leaves their values after it; uncertain[i] marks a param the reference
// cannot predict (Lion's sign of a near-zero interpolation, which fp32 may take either way).
// add_random_params: the engine setup such tests share.
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference_adam.hpp"
#include "reference_algorithms.hpp"
#include "test_support.hpp"

namespace kopt_test {

// Params "p0", "p1", ... of `sizes` elements, uniform in [-1, 1) from `rng`, with (zero)
// grads, added to engine `opt`: the setup of tests that step an engine against a reference.
template <class P, class Space, class Opt, std::size_t N>
auto add_random_params(Opt& opt, const std::size_t (&sizes)[N], std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::pair<std::vector<std::unique_ptr<SpaceArray<P, Space>>>,
            std::vector<std::unique_ptr<SpaceArray<P, Space>>>>
      out;
  auto& [params, grads] = out;
  for (std::size_t j = 0; j < N; ++j) {
    params.push_back(std::make_unique<SpaceArray<P, Space>>(sizes[j]));
    grads.push_back(std::make_unique<SpaceArray<P, Space>>(sizes[j]));
    for (auto& x : params[j]->host) x = kopt::Impl::from_float<P>(dist(rng));
    params[j]->upload();
    opt.add("p" + std::to_string(j), params[j]->tensor(), grads[j]->tensor());
  }
  return out;
}

using ReferenceStep =
    std::function<void(int t, std::vector<double>& p, const std::vector<double>& g,
                       std::array<std::vector<double>, 3>& s, std::vector<char>& uncertain)>;

inline ReferenceStep adam_step(const kopt::AdamConfig& c) {
  return [c](int t, std::vector<double>& p, const std::vector<double>& g,
             std::array<std::vector<double>, 3>& s, std::vector<char>&) {
    ReferenceAdam r(c, p);
    r.step = t - 1;
    r.exp_avg = s[0], r.exp_avg_sq = s[1], r.max_exp_avg_sq = s[2];
    r.update(g);
    p = r.param, s[0] = r.exp_avg, s[1] = r.exp_avg_sq, s[2] = r.max_exp_avg_sq;
  };
}

inline ReferenceStep sgd_step(const kopt::SgdConfig& c) {
  return [c](int t, std::vector<double>& p, const std::vector<double>& g,
             std::array<std::vector<double>, 3>& s, std::vector<char>&) {
    ReferenceSgd r(c, p);
    r.step = t - 1;
    r.momentum_buffer = s[0];
    r.update(g);
    p = r.param, s[0] = r.momentum_buffer;
  };
}

inline ReferenceStep adagrad_step(const kopt::AdagradConfig& c) {
  return [c](int t, std::vector<double>& p, const std::vector<double>& g,
             std::array<std::vector<double>, 3>& s, std::vector<char>&) {
    ReferenceAdagrad r(c, p);  // its sum starts at initial_accumulator_value
    r.step = t - 1;
    if (t > 1) r.sum = s[0];  // kopt stores 0 until the first step
    r.update(g);
    p = r.param, s[0] = r.sum;
  };
}

inline ReferenceStep lion_step(const kopt::LionConfig& c) {
  return [c](int t, std::vector<double>& p, const std::vector<double>& g,
             std::array<std::vector<double>, 3>& s, std::vector<char>& uncertain) {
    ReferenceLion r(c, p);
    r.step = t - 1;
    r.exp_avg = s[0];
    for (std::size_t i = 0; i < p.size(); ++i) {  // a sign fp32 may take either way
      const double a = c.beta1 * s[0][i], b = (1.0 - c.beta1) * g[i];
      uncertain[i] = std::abs(a + b) <= 1e-6 * (std::abs(a) + std::abs(b));
    }
    r.update(g);
    p = r.param, s[0] = r.exp_avg;
  };
}

}  // namespace kopt_test
