#pragma once
/// \file
/// kopt::LossScaler: dynamic loss scaling for fp16 training, as torch.cuda.amp.GradScaler.

#include <cstdint>

namespace kopt {

/// The scaler's settings (torch.cuda.amp.GradScaler's defaults).
struct LossScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;  ///< finite steps in a row before the scale grows

  /// Throws kopt::InvalidArgument naming the field: init_scale > 0, growth_factor > 1,
  /// 0 < backoff_factor < 1, growth_interval >= 1.
  void validate() const;
};

/// The training code multiplies its loss by scale() before backward, so grads arrive scaled;
/// the optimizer divides them by scale() inside the update. A step whose grads hold an Inf or
/// NaN is skipped and the scale backs off; growth_interval finite steps in a row grow it.
/// The scale stays finite and > 0: a backoff that would reach 0 (after ~1,075 skipped steps
/// in a row at the defaults) or a growth that would reach Inf leaves it where it is.
class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});
  double scale() const { return scale_; }
  /// Steps since the last backoff or growth.
  std::int64_t growth_tracker() const { return tracker_; }
  /// Records the outcome of a step: finite grads (it ran) or not (it was skipped).
  void update(bool grads_finite);
  /// Sets the scale and growth tracker (a checkpoint's); throws kopt::InvalidArgument
  /// unless scale is finite and > 0 and tracker >= 0.
  void restore(double scale, std::int64_t growth_tracker);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t tracker_ = 0;
};

}  // namespace kopt
