#include <cmath>
#include <kopt/adam_config.hpp>
#include <kopt/error.hpp>

namespace kopt {

void AdamConfig::validate() const {
  auto check = [](const char* field, double value, bool ok, const char* rule) {
    KOPT_THROW_IF(!std::isfinite(value) || !ok,
                  "AdamConfig." << field << " = " << value << " is invalid: " << rule);
  };
  check("lr", lr, lr >= 0.0, "must be finite and >= 0");
  check("beta1", beta1, beta1 >= 0.0 && beta1 < 1.0, "must be in [0, 1)");
  check("beta2", beta2, beta2 >= 0.0 && beta2 < 1.0, "must be in [0, 1)");
  check("eps", eps, eps > 0.0, "must be finite and > 0");
  check("weight_decay", weight_decay, weight_decay >= 0.0, "must be finite and >= 0");
}

AdamStepScalars AdamStepScalars::make(const AdamConfig& c, std::int64_t t, double grad_scale) {
  const double bc1 = c.bias_correction ? 1.0 - std::pow(c.beta1, static_cast<double>(t)) : 1.0;
  const double bc2 = c.bias_correction ? 1.0 - std::pow(c.beta2, static_cast<double>(t)) : 1.0;
  AdamStepScalars s;
  s.grad_scale = static_cast<float>(c.maximize ? -grad_scale : grad_scale);
  s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  s.l2_decay = static_cast<float>(c.decoupled ? 0.0 : c.weight_decay);
  s.lr_decay = static_cast<float>(c.decoupled ? c.lr * c.weight_decay : 0.0);
  s.step_size = static_cast<float>(c.lr / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.eps = static_cast<float>(c.eps);
  s.adds_l2 = s.l2_decay != 0.0f;
  return s;
}

}  // namespace kopt
