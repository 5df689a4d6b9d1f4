// Adam's results are bitwise those of kopt before algorithms became policies: a recorded
// trajectory (every Adam option, f32/bf16/f16 params and grads, local and offloaded groups,
// clipping on, 300 steps) hashed and compared with the hashes the library gave at git
// bcdaeb4, the last commit before the redesign. Any change to Adam's math, its scalars or
// the order of its float operations changes a hash.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kopt/kopt.hpp>
#include <string>
#include <vector>

#ifndef KOPT_TRAJECTORY_MAIN
#include <gtest/gtest.h>
#endif

namespace {
namespace test_adam_trajectory {

struct Param {
  kopt::DType dtype;
  std::int64_t numel;
  std::size_t group;
  std::vector<std::uint16_t> p16, g16;  // 16-bit params and grads
  std::vector<float> p32, g32;
};

std::uint64_t lcg(std::uint64_t& s) {
  return s = s * 6364136223846793005ull + 1442695040888963407ull;
}
float uniform(std::uint64_t& s) {  // in [-1, 1), from the top 24 bits
  return static_cast<float>(static_cast<std::int64_t>(lcg(s) >> 40) - (1 << 23)) / (1 << 23);
}
std::uint16_t to16(float x, kopt::DType d) {
  return d == kopt::DType::bf16 ? kopt::bfloat16::from_float(x).bits
                                : kopt::float16::from_float(x).bits;
}

std::uint64_t fnv(const void* data, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The hash of every param after the run.
std::vector<std::uint64_t> run_trajectory() {
  const std::vector<kopt::AdamConfig> configs = {
      kopt::AdamConfig{},  // AdamW
      kopt::AdamConfig{.lr = 3e-3, .weight_decay = 0.05, .decoupled = false},
      kopt::AdamConfig{.lr = 2e-3, .beta2 = 0.99, .amsgrad = true, .maximize = true},
      kopt::AdamConfig{.eps = 1e-6, .weight_decay = 0.0, .bias_correction = false}};
  const kopt::DType dtypes[] = {kopt::DType::f32, kopt::DType::bf16, kopt::DType::f16};
  std::vector<Param> params;
  std::uint64_t seed = 12345;
  for (int j = 0; j < 12; ++j) {
    Param p{dtypes[j % 3], 1 + 997 * j + (j % 5), static_cast<std::size_t>(j % 4), {}, {}, {}, {}};
    const auto n = static_cast<std::size_t>(p.numel);
    if (p.dtype == kopt::DType::f32) {
      p.p32.resize(n), p.g32.resize(n);
      for (float& x : p.p32) x = uniform(seed);
    } else {
      p.p16.resize(n), p.g16.resize(n);
      for (auto& x : p.p16) x = to16(uniform(seed), p.dtype);
    }
    params.push_back(std::move(p));
  }
  std::vector<kopt::ParamGroup> groups;
  for (std::size_t g = 0; g < configs.size(); ++g)
    groups.emplace_back(configs[g],
                        g == 3 ? kopt::StatePlacement::host : kopt::StatePlacement::with_params);
  for (std::size_t j = 0; j < params.size(); ++j) {
    Param& p = params[j];
    const std::string name = "p" + std::to_string(j);
    kopt::Tensor param, grad;
    if (p.dtype == kopt::DType::f32) {
      param = kopt::Tensor::from(p.p32.data(), p.numel);
      grad = kopt::Tensor::from(p.g32.data(), p.numel);
    } else {
      param = kopt::Tensor{p.p16.data(), p.numel, p.dtype};
      grad = kopt::Tensor{p.g16.data(), p.numel, p.dtype};
    }
    groups[p.group].add(name, param, grad);
  }
  kopt::HybridOptions options;
  options.max_grad_norm = 5.0;
  kopt::HybridOptimizer opt(groups, options);
  for (int s = 0; s < 300; ++s) {
    for (Param& p : params) {
      for (float& x : p.g32) x = uniform(seed) * 0.1f;
      for (auto& x : p.g16) x = to16(uniform(seed) * 0.1f, p.dtype);
    }
    opt.step();
  }
  std::vector<std::uint64_t> hashes;
  for (const Param& p : params)
    hashes.push_back(p.dtype == kopt::DType::f32 ? fnv(p.p32.data(), p.p32.size() * 4)
                                                 : fnv(p.p16.data(), p.p16.size() * 2));
  return hashes;
}

}  // namespace test_adam_trajectory
}  // namespace

#ifdef KOPT_TRAJECTORY_MAIN
// Built against an older kopt to record the hashes below.
int main() {
  Kokkos::ScopeGuard guard;
  for (const std::uint64_t h : run_trajectory())
    std::printf("0x%016llxull,\n", (unsigned long long)h);
}
#else
namespace {
namespace test_adam_trajectory {

TEST(AdamTrajectory, BitwiseAsRecordedBeforeThePolicyRedesign) {
  const std::vector<std::uint64_t> recorded = {
#include "adam_trajectory_hashes.inc"
  };
  EXPECT_EQ(run_trajectory(), recorded);
}

}  // namespace test_adam_trajectory
}  // namespace
#endif
