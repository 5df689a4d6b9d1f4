#pragma once
// Test oracles for SGD, Lion and Adagrad in double precision, written from the equations
// in kopt/sgd_config.hpp, kopt/lion_config.hpp and kopt/adagrad_config.hpp (torch.optim.SGD
// and Adagrad, single-tensor path; Lion as Chen et al. 2023), independently of kopt's
// policies and step scalars. A 16-bit param's reference is its double master: it starts
// from the widened 16-bit value and never rounds.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <kopt/adafactor_config.hpp>
#include <kopt/adagrad_config.hpp>
#include <kopt/lamb_config.hpp>
#include <kopt/lion_config.hpp>
#include <kopt/muon_config.hpp>
#include <kopt/sgd_config.hpp>
#include <limits>
#include <vector>

namespace kopt_test {

// torch.optim.SGD: the momentum buffer is created as the first step's gradient.
struct ReferenceSgd {
  kopt::SgdConfig config;
  std::vector<double> param, momentum_buffer;
  // The buffer's recurrence on |d_p|: bounds |buffer| and the terms its rounding errors
  // scale with (the buffer itself may be near 0 by cancellation while its error is not).
  std::vector<double> momentum_buffer_size;
  std::int64_t step = 0;

  ReferenceSgd(const kopt::SgdConfig& c, std::vector<double> p)
      : config(c),
        param(std::move(p)),
        momentum_buffer(param.size(), 0.0),
        momentum_buffer_size(param.size(), 0.0) {}

  // One step with gradient `grad` (as stored, e.g. rounded to bf16) times `grad_scale`.
  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::SgdConfig& c = config;
    ++step;
    for (std::size_t i = 0; i < param.size(); ++i) {
      double d_p = grad[i] * grad_scale;
      if (c.maximize) d_p = -d_p;
      if (c.weight_decay != 0.0) d_p = d_p + c.weight_decay * param[i];
      if (c.momentum != 0.0) {
        double& buf = momentum_buffer[i];
        double& size = momentum_buffer_size[i];
        buf = step == 1 ? d_p : c.momentum * buf + (1.0 - c.dampening) * d_p;
        size = step == 1 ? std::abs(d_p) : c.momentum * size + std::abs((1.0 - c.dampening) * d_p);
        d_p = c.nesterov ? d_p + c.momentum * buf : buf;
      }
      param[i] = param[i] - c.lr * d_p;
    }
  }
};

// torch.optim.Adagrad: the sum starts at initial_accumulator_value; lr decays with the
// step count.
struct ReferenceAdagrad {
  kopt::AdagradConfig config;
  std::vector<double> param, sum;
  std::int64_t step = 0;

  ReferenceAdagrad(const kopt::AdagradConfig& c, std::vector<double> p)
      : config(c), param(std::move(p)), sum(param.size(), c.initial_accumulator_value) {}

  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::AdagradConfig& c = config;
    ++step;
    const double clr = c.lr / (1.0 + static_cast<double>(step - 1) * c.lr_decay);
    for (std::size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * grad_scale;
      if (c.maximize) g = -g;
      if (c.weight_decay != 0.0) g = g + c.weight_decay * param[i];
      sum[i] += g * g;
      param[i] -= clr * g / (std::sqrt(sum[i]) + c.eps);
    }
  }
};

// Lion. The direction is the sign of an interpolation that is near 0 for some elements: an
// fp32 optimizer and this double one then legitimately disagree. interpolation() gives the
// double value and a size its fp32 rounding errors are proportional to, so a test can tell
// which signs are certain; an update may be handed the directions to use (NaN: this
// reference's own sign).
struct ReferenceLion {
  kopt::LionConfig config;
  std::vector<double> param, exp_avg;
  // beta2-average of |g|: bounds |exp_avg| and the terms whose rounding errors it carries
  // (exp_avg itself may be near 0 by cancellation while its error is not).
  std::vector<double> exp_avg_size;
  std::int64_t step = 0;

  ReferenceLion(const kopt::LionConfig& c, std::vector<double> p)
      : config(c),
        param(std::move(p)),
        exp_avg(param.size(), 0.0),
        exp_avg_size(param.size(), 0.0) {}

  struct Interpolation {
    double value;  // beta1 m + (1 - beta1) g
    double scale;  // beta1 |m|-size + (1 - beta1) |g|: what its rounding errors scale with
  };
  // The interpolation element i would take with scaled gradient `g` (maximize applied here).
  Interpolation interpolation(std::size_t i, double g) const {
    if (config.maximize) g = -g;
    const double a = config.beta1 * exp_avg[i], b = (1.0 - config.beta1) * g;
    return {a + b, config.beta1 * exp_avg_size[i] + std::abs(b)};
  }
  static double sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); }

  void update(const std::vector<double>& grad, double grad_scale = 1.0,
              const std::vector<double>* directions = nullptr) {
    const kopt::LionConfig& c = config;
    ++step;
    for (std::size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * grad_scale;
      double dir = sign(interpolation(i, g).value);
      if (directions != nullptr && !std::isnan((*directions)[i])) dir = (*directions)[i];
      if (c.maximize) g = -g;
      param[i] *= 1.0 - c.lr * c.weight_decay;
      param[i] -= c.lr * dir;
      exp_avg[i] = c.beta2 * exp_avg[i] + (1.0 - c.beta2) * g;
      exp_avg_size[i] = c.beta2 * exp_avg_size[i] + (1.0 - c.beta2) * std::abs(g);
    }
  }
};

// ||a - b||_2 / ||size||_2: an error relative to the magnitudes it scales with (0 when
// both are empty or zero).
inline double error_relative_to(const std::vector<double>& a, const std::vector<double>& b,
                                const std::vector<double>& size) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += size[i] * size[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline constexpr double kUseOwnSign = std::numeric_limits<double>::quiet_NaN();

// LAMB as apex's FusedLAMB (kopt/lamb_config.hpp): Adam's moments, then per param the
// trust ratio ||p|| / ||u|| of the whole update direction u.
struct ReferenceLamb {
  kopt::LambConfig config;
  std::vector<double> param, exp_avg, exp_avg_sq;
  std::vector<double> exp_avg_size;  // exp_avg's recurrence on |terms|: its error scale
  std::int64_t step = 0;

  ReferenceLamb(const kopt::LambConfig& c, std::vector<double> p)
      : config(c),
        param(std::move(p)),
        exp_avg(param.size(), 0.0),
        exp_avg_sq(param.size(), 0.0),
        exp_avg_size(param.size(), 0.0) {}

  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::LambConfig& c = config;
    ++step;
    const double t = static_cast<double>(step);
    const double bc1 = c.bias_correction ? 1.0 - std::pow(c.beta1, t) : 1.0;
    const double bc2 = c.bias_correction ? 1.0 - std::pow(c.beta2, t) : 1.0;
    const double coef = c.grad_averaging ? 1.0 - c.beta1 : 1.0;
    std::vector<double> u(param.size());
    double p_sq = 0.0, u_sq = 0.0;
    for (std::size_t i = 0; i < param.size(); ++i) {
      double g = grad[i] * grad_scale;
      if (c.maximize) g = -g;
      if (!c.decoupled) g += c.weight_decay * param[i];
      exp_avg[i] = c.beta1 * exp_avg[i] + coef * g;
      exp_avg_size[i] = c.beta1 * exp_avg_size[i] + std::abs(coef * g);
      exp_avg_sq[i] = c.beta2 * exp_avg_sq[i] + (1.0 - c.beta2) * g * g;
      u[i] = (exp_avg[i] / bc1) / (std::sqrt(exp_avg_sq[i] / bc2) + c.eps) +
             (c.decoupled ? c.weight_decay * param[i] : 0.0);
      p_sq += param[i] * param[i];
      u_sq += u[i] * u[i];
    }
    double r = 1.0;
    if (c.trust_ratio && (c.weight_decay != 0.0 || c.always_adapt)) {
      const double p_norm = std::sqrt(p_sq), u_norm = std::sqrt(u_sq);
      if (p_norm > 0.0 && u_norm > 0.0) r = p_norm / u_norm;
      if (c.clamp_trust) r = std::min(std::max(r, c.min_trust), c.max_trust);
    }
    last_ratio = r;
    for (std::size_t i = 0; i < param.size(); ++i) param[i] -= c.lr * r * u[i];
  }
  double last_ratio = 1.0;  // the last step's r
};

// Muon as torch.optim.Muon (kopt/muon_config.hpp), all of it in double: the momentum, the
// Newton-Schulz iteration on the rows x cols matrix (on its transpose when tall, as torch
// writes it), the shape's lr scale, decoupled decay.
inline std::vector<double> reference_newton_schulz(std::vector<double> x, std::int64_t rows,
                                                   std::int64_t cols, const kopt::MuonConfig& c) {
  const bool tall = rows > cols;
  const std::int64_t m = tall ? cols : rows, n = tall ? rows : cols;  // X is m x n, m <= n
  std::vector<double> t(x.size());
  const auto at = [&](std::vector<double>& v, std::int64_t i, std::int64_t j) -> double& {
    return tall ? v[static_cast<std::size_t>(j * cols + i)]
                : v[static_cast<std::size_t>(i * cols + j)];
  };
  double sq = 0.0;
  for (const double v : x) sq += v * v;
  const double norm = std::max(std::sqrt(sq), c.eps);
  for (double& v : x) v /= norm;
  std::vector<double> a(static_cast<std::size_t>(m * m)), b(a.size());
  for (int it = 0; it < static_cast<int>(c.ns_steps); ++it) {
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        double s = 0.0;
        for (std::int64_t k = 0; k < n; ++k) s += at(x, i, k) * at(x, j, k);
        a[static_cast<std::size_t>(i * m + j)] = s;
      }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        double s = 0.0;
        for (std::int64_t k = 0; k < m; ++k)
          s += a[static_cast<std::size_t>(i * m + k)] * a[static_cast<std::size_t>(k * m + j)];
        b[static_cast<std::size_t>(i * m + j)] =
            c.ns_b * a[static_cast<std::size_t>(i * m + j)] + c.ns_c * s;
      }
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0.0;
        for (std::int64_t k = 0; k < m; ++k)
          s += b[static_cast<std::size_t>(i * m + k)] * at(x, k, j);
        at(t, i, j) = c.ns_a * at(x, i, j) + s;
      }
    std::swap(x, t);
  }
  return x;
}

struct ReferenceMuon {
  kopt::MuonConfig config;
  std::int64_t rows, cols;
  std::vector<double> param, momentum_buffer;
  std::vector<double> momentum_buffer_size;  // the buffer's recurrence on |g|
  std::int64_t step = 0;

  ReferenceMuon(const kopt::MuonConfig& c, std::vector<double> p, std::int64_t r, std::int64_t k)
      : config(c),
        rows(r),
        cols(k),
        param(std::move(p)),
        momentum_buffer(param.size(), 0.0),
        momentum_buffer_size(param.size(), 0.0) {}

  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::MuonConfig& c = config;
    ++step;
    std::vector<double> u(param.size());
    for (std::size_t i = 0; i < param.size(); ++i) {
      const double g = grad[i] * grad_scale;
      momentum_buffer[i] += (1.0 - c.momentum) * (g - momentum_buffer[i]);
      momentum_buffer_size[i] += (1.0 - c.momentum) * (std::abs(g) - momentum_buffer_size[i]);
      u[i] = c.nesterov ? g + c.momentum * (momentum_buffer[i] - g) : momentum_buffer[i];
    }
    if (param.empty()) return;
    const std::vector<double> o = reference_newton_schulz(u, rows, cols, c);
    const double rate = c.lr * c.lr_scale(static_cast<double>(rows), static_cast<double>(cols));
    for (std::size_t i = 0; i < param.size(); ++i)
      param[i] = param[i] * (1.0 - c.lr * c.weight_decay) - rate * o[i];
  }
};

// Adafactor as torch.optim.Adafactor (kopt/adafactor_config.hpp), all of it in double: the
// factored statistics of a matrix (rows >= 0) or the variance of a vector (rows < 0), the
// relative step, the RMS clipping, decoupled decay.
struct ReferenceAdafactor {
  kopt::AdafactorConfig config;
  std::int64_t rows, cols;
  std::vector<double> param, row_var, col_var, variance;
  std::int64_t step = 0;

  ReferenceAdafactor(const kopt::AdafactorConfig& c, std::vector<double> p, std::int64_t r,
                     std::int64_t k)
      : config(c), rows(r), cols(k), param(std::move(p)) {
    if (param.empty()) return;  // no state
    if (rows >= 0)
      row_var.assign(static_cast<std::size_t>(rows), 0.0),
          col_var.assign(static_cast<std::size_t>(cols), 0.0);
    else
      variance.assign(param.size(), 0.0);
  }
  // The state as kopt keeps it: row_var then col_var, or variance.
  std::vector<double> state() const {
    std::vector<double> s = row_var;
    s.insert(s.end(), col_var.begin(), col_var.end());
    s.insert(s.end(), variance.begin(), variance.end());
    return s;
  }

  void update(const std::vector<double>& grad, double grad_scale = 1.0) {
    const kopt::AdafactorConfig& c = config;
    ++step;
    const auto t = static_cast<double>(step);
    const double beta = std::pow(t, c.beta2_decay);
    const double rho = std::min(c.lr, 1.0 / std::sqrt(t));
    const auto n = param.size();
    if (n == 0) return;
    double pp = 0.0;
    for (const double p : param) pp += p * p;
    const double alpha = std::max(c.eps2, std::sqrt(pp / static_cast<double>(n))) * rho;
    std::vector<double> g(n), v(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = grad[i] * grad_scale * (c.maximize ? -1.0 : 1.0);
    if (rows >= 0) {
      const auto R = static_cast<std::size_t>(rows), C = static_cast<std::size_t>(cols);
      double mean = 0.0;
      for (std::size_t i = 0; i < R; ++i) {
        double s = 0.0;
        for (std::size_t j = 0; j < C; ++j) s += g[i * C + j] * g[i * C + j];
        row_var[i] += beta * (s / static_cast<double>(C) - row_var[i]);
        mean += row_var[i] / static_cast<double>(R);
      }
      for (std::size_t j = 0; j < C; ++j) {
        double s = 0.0;
        for (std::size_t i = 0; i < R; ++i) s += g[i * C + j] * g[i * C + j];
        col_var[j] += beta * (s / static_cast<double>(R) - col_var[j]);
      }
      mean = std::max(mean, c.eps1);
      for (std::size_t i = 0; i < R; ++i)
        for (std::size_t j = 0; j < C; ++j) v[i * C + j] = row_var[i] * col_var[j] / mean;
    } else {
      for (std::size_t i = 0; i < n; ++i) v[i] = variance[i] += beta * (g[i] * g[i] - variance[i]);
    }
    double uu = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      g[i] /= std::sqrt(std::max(v[i], c.eps1 * c.eps1));
      uu += g[i] * g[i];
    }
    const double clip = std::max(1.0, std::sqrt(uu / static_cast<double>(n)) / c.d);
    for (std::size_t i = 0; i < n; ++i)
      param[i] = param[i] * (1.0 - c.lr * c.weight_decay) - alpha / clip * g[i];
  }
};

}  // namespace kopt_test
