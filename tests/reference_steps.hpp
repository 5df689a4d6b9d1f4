#pragma once
// One step of each algorithm's double-precision reference, started from a state read back
// from kopt (for tests that check kopt step by step, whatever form it stores its state in):
// step(t, p, g, s, uncertain) takes the param p (or its master) and the policy's arrays s
// before step t, and leaves their values after it; uncertain[i] marks a param the reference
// cannot predict (Lion's sign of a near-zero interpolation, which fp32 may take either way).
#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "reference_adam.hpp"
#include "reference_algorithms.hpp"

namespace kopt_test {

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
