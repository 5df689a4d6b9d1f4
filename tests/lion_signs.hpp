#pragma once
// Lion's update moves each element by the decay and by exactly lr * direction, direction in
// {-1, 0, 1}, the sign of an interpolation that is near 0 for some elements: there fp32 and
// the double reference may both be right and still disagree. These helpers read the
// direction kopt took back from the change of the param, demand that it is the reference's
// sign wherever that sign is certain, and let the reference follow kopt (counted) where it
// is not, so that params and exp_avg can then be compared to fp32 accuracy.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "reference_algorithms.hpp"

namespace kopt_test {

struct LionSigns {
  std::int64_t element_steps = 0;
  std::int64_t uncertain = 0;      // |interpolation| within the band: either sign is right
  std::int64_t disagreements = 0;  // of those, kopt's sign differs from the double one
};

// Relative half-width of the band around 0 where Lion's sign is uncertain. kopt's fp32
// exp_avg carries rounding errors of at most ~ (memory of 1 / (1 - beta2) steps) ulps of the
// |g| average (ReferenceLion::exp_avg_size); 1e-4 (840 ulps) covers beta2 <= 0.99 with room.
inline constexpr double kLionBand = 1e-4;

// The directions for ref.update(): kopt's where the sign is uncertain, NaN (the reference's
// own) elsewhere. `before` and `after`: the fp32 values kopt updated (param or master)
// around the step; `g`: the grads as stored; `grad_scale`: the step's factor.
inline std::vector<double> lion_directions(const ReferenceLion& ref, const std::vector<double>& g,
                                           double grad_scale, const std::vector<double>& before,
                                           const std::vector<double>& after, LionSigns& signs,
                                           const std::string& what) {
  const kopt::LionConfig& c = ref.config;
  const double decay = c.lr * c.weight_decay, inv_lr = 1.0 / c.lr;
  std::vector<double> dirs(after.size(), kUseOwnSign);
  for (std::size_t i = 0; i < after.size(); ++i) {
    const double taken = (before[i] - after[i] - decay * before[i]) * inv_lr;
    const double rounded = taken > 0.5 ? 1.0 : (taken < -0.5 ? -1.0 : 0.0);
    // 1e-2: the fp32 rounding of a param of size <= 2 is < 2.4e-7, over lr >= 1e-4.
    if (!(std::abs(taken - rounded) <= 1e-2)) {
      ADD_FAILURE() << what << "[" << i << "] step " << ref.step + 1 << " moved by " << taken
                    << " lr: not a decay and a step of lr * sign";
      return dirs;
    }
    const auto [value, scale] = ref.interpolation(i, g[i] * grad_scale);
    ++signs.element_steps;
    if (std::abs(value) > kLionBand * scale || scale == 0.0) {
      if (rounded != ReferenceLion::sign(value)) {
        ADD_FAILURE() << what << "[" << i << "] step " << ref.step + 1 << ": direction " << rounded
                      << ", interpolation " << value << " (terms " << scale << ")";
        return dirs;
      }
    } else {
      ++signs.uncertain;
      signs.disagreements += rounded != ReferenceLion::sign(value);
      dirs[i] = rounded;
    }
  }
  return dirs;
}

}  // namespace kopt_test
