#include <cmath>
#include <kopt/error.hpp>
#include <kopt/loss_scaler.hpp>

namespace kopt {

void LossScalerOptions::validate() const {
  KOPT_THROW_IF(!(std::isfinite(init_scale) && init_scale > 0),
                "LossScalerOptions.init_scale = " << init_scale << " is invalid: must be > 0");
  KOPT_THROW_IF(
      !(std::isfinite(growth_factor) && growth_factor > 1),
      "LossScalerOptions.growth_factor = " << growth_factor << " is invalid: must be > 1");
  KOPT_THROW_IF(
      !(backoff_factor > 0 && backoff_factor < 1),
      "LossScalerOptions.backoff_factor = " << backoff_factor << " is invalid: must be in (0, 1)");
  KOPT_THROW_IF(growth_interval < 1, "LossScalerOptions.growth_interval = "
                                         << growth_interval << " is invalid: must be >= 1");
}

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.init_scale) {
  options_.validate();
}

void LossScaler::update(bool grads_finite) {
  // The scale stays finite and > 0 (a backoff to 0 or a growth to Inf is not taken): a
  // checkpoint of it must load, and a zero scale would zero every grad.
  if (!grads_finite) {
    const double backed_off = scale_ * options_.backoff_factor;
    if (backed_off > 0) scale_ = backed_off;
    tracker_ = 0;
    return;
  }
  if (++tracker_ == options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    tracker_ = 0;
  }
}

void LossScaler::restore(double scale, std::int64_t growth_tracker) {
  // A tracker at or past the growth interval would never meet it again: the scale would
  // never grow.
  KOPT_THROW_IF(!(std::isfinite(scale) && scale > 0) || growth_tracker < 0 ||
                    growth_tracker >= options_.growth_interval,
                "kopt::LossScaler::restore(scale = "
                    << scale << ", growth_tracker = " << growth_tracker
                    << "): invalid (scale must be finite and > 0, growth_tracker in [0, "
                    << options_.growth_interval << "))");
  scale_ = scale;
  tracker_ = growth_tracker;
}

}  // namespace kopt
