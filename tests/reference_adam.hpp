#pragma once
// The test oracle: Adam/AdamW in double precision, written the way torch.optim.Adam/AdamW
// (single-tensor path) states it, independently of kopt's kernel and scalars.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/adam_config.hpp>
#include <vector>

namespace kopt_test {

struct ReferenceAdam {
  kopt::AdamConfig config;
  std::vector<double> param, exp_avg, exp_avg_sq, max_exp_avg_sq;
  std::int64_t step = 0;

  ReferenceAdam(const kopt::AdamConfig& c, std::vector<double> p)
      : config(c),
        param(std::move(p)),
        exp_avg(param.size(), 0.0),
        exp_avg_sq(param.size(), 0.0),
        max_exp_avg_sq(param.size(), 0.0) {}

  // One step with gradient `grad` (already as the kernel sees it, e.g. rounded to bf16),
  // multiplied by `grad_scale`.
  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::AdamConfig& c = config;
    ++step;
    const double t = static_cast<double>(step);
    const double bc1 = c.bias_correction ? 1.0 - std::pow(c.beta1, t) : 1.0;
    const double bc2 = c.bias_correction ? 1.0 - std::pow(c.beta2, t) : 1.0;
    for (std::size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * grad_scale;
      if (c.maximize) g = -g;
      if (c.decoupled) {
        param[i] *= 1.0 - c.lr * c.weight_decay;
      } else {
        g += c.weight_decay * param[i];
      }
      exp_avg[i] += (g - exp_avg[i]) * (1.0 - c.beta1);  // torch: exp_avg.lerp_(grad, 1 - beta1)
      exp_avg_sq[i] = exp_avg_sq[i] * c.beta2 + (1.0 - c.beta2) * g * g;
      double second = exp_avg_sq[i];
      if (c.amsgrad) {
        max_exp_avg_sq[i] = std::max(max_exp_avg_sq[i], exp_avg_sq[i]);
        second = max_exp_avg_sq[i];
      }
      const double denom = std::sqrt(second) / std::sqrt(bc2) + c.eps;
      param[i] -= (c.lr / bc1) * exp_avg[i] / denom;
    }
  }
};

// ||a - b||_2 / ||b||_2 (0 when both are empty or zero).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace kopt_test
