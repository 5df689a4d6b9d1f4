// What the lane loops' tests (test_fused_lanes.cpp, test_narrow_lanes.cpp) feed them: random
// elements with, every so often, one that takes a path of its own, and the two Adam configs
// whose variants they run.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <kopt/adam_config.hpp>
#include <kopt/impl/param_remainder.hpp>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace kopt_test {

struct LaneElement {
  float w, g, m, v;  // master (or param), grad, exp_avg, exp_avg_sq
  float max;         // max_exp_avg_sq (amsgrad)
};

/// The float with bits `b`.
inline float float_of_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

/// Element i: normal values at Adam's scales, and
/// - every 89th a subnormal param with a zero grad and no state (AVX-512 BF16's conversion
///   would flush its bf16 rounding to zero);
/// - every 67th moments subnormal in bf16 and zero in f16;
/// - grads of 1e20 (scaled by 0.5 its square is inf, and v stays finite only through the
///   guard), -inf and NaN, each in some vector: the guarded rerun of one vector;
/// - NaN masters whose low halves carry when rounded as numbers (0x7fffffff would become -0)
///   and, in another vector, a signaling NaN max beside finite moments (a store must quiet
///   it; under AdamW it reaches the store alone: lane_amsgrad_adamw): a loop that rounds
///   without NaN tests must not see them.
inline LaneElement lane_element(std::int64_t i, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  LaneElement e{normal(rng), normal(rng) * 1e-2f, normal(rng) * 1e-3f,
                std::abs(normal(rng)) * 1e-5f, 0.0f};
  e.max = e.v * 1.5f;
  if (i % 89 == 7) e = {1.5e-39f * static_cast<float>(i % 5 + 1), 0.0f, 0.0f, 0.0f, 0.0f};
  if (i % 331 == 150) e.w = float_of_bits(0x7fffffffu);
  if (i % 331 == 151) e.w = float_of_bits(0xffffffffu);
  if (i % 331 == 180) e.max = float_of_bits(0x7f810000u);
  if (i % 67 == 5) e.m = 2e-39f, e.v = 3e-39f;
  if (i % 211 == 100) e.g = 1e20f;
  if (i % 401 == 200) e.g = -std::numeric_limits<float>::infinity();
  if (i % 499 == 300) e.g = std::numeric_limits<float>::quiet_NaN();
  return e;
}

/// Appends master `w` as a form stores it: a remainder's bf16 param and low half, an fp32
/// master beside the param rounded to nearest, or the param alone.
template <class ParamT, class MasterT>
void push_master(std::vector<ParamT>& param, std::vector<MasterT>& master, float w) {
  if constexpr (std::is_same_v<MasterT, std::uint16_t>) {
    param.push_back(kopt::Impl::split_param(w));
    master.push_back(kopt::Impl::split_remainder(w));
  } else {
    param.push_back(kopt::Impl::from_float<ParamT>(w));
    if constexpr (std::is_same_v<MasterT, float>) master.push_back(w);
  }
}

inline const kopt::AdamConfig lane_adamw{.lr = 1e-3, .weight_decay = 0.01};
inline const kopt::AdamConfig lane_amsgrad_adamw{.lr = 1e-3, .amsgrad = true};
inline const kopt::AdamConfig lane_amsgrad_l2{
    .lr = 1e-3, .weight_decay = 0.01, .decoupled = false, .amsgrad = true};

}  // namespace kopt_test
