#pragma once
// The step-by-step check of an engine whose state arrays are stored narrowed
// (kopt::StateStorage's dtypes): every step against a double-precision reference started
// from the state kopt stored (widened), its new state rounded to each array's dtype the same
// way. Shared by the bf16-state and per-array-dtype tests.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <kopt/impl/block_q8.hpp>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference_steps.hpp"
#include "test_support.hpp"

namespace kopt_test {

// What a param's update works on, and its state, as floats.
struct Values {
  std::vector<float> w;                 // the param (f32) or its master
  std::array<std::vector<float>, 3> s;  // the policy's arrays, widened
};

template <class Opt, class P, class Space>
inline Values read_values(Opt& opt, const std::string& name, SpaceArray<P, Space>& param) {
  const std::size_t n = param.size();
  Values v;
  v.w.resize(n);
  for (auto& a : v.s) a.assign(n, 0.0f);
  opt.read_state(name, 0, static_cast<std::int64_t>(n),
                 {v.s[0].data(), v.s[1].data(), v.s[2].data(),
                  std::is_same_v<P, float> ? nullptr : v.w.data()});
  if constexpr (std::is_same_v<P, float>) v.w = param.download();
  return v;
}

// The bits a 16-bit array of `dtype` stores for `x` (the reference's new value): rounded to
// nearest even, or with the random bits `bits` under stochastic state rounding.
inline std::int64_t state_bits(kopt::DType dtype, double x, bool stochastic, std::uint32_t bits) {
  const std::uint32_t f = kopt::Impl::float_bits(static_cast<float>(x));
  if (dtype == kopt::DType::bf16)
    return stochastic ? kopt::Impl::stochastic_bf16_bits(f, bits)
                      : kopt::bfloat16::from_float(static_cast<float>(x)).bits;
  return stochastic ? kopt::Impl::stochastic_f16_bits(f, bits)
                    : kopt::float16::from_float(static_cast<float>(x)).bits;
}

// `x` (a param's new state, in double) as a q8 array of it holds it: rounded to float, each
// block of kopt::Impl::q8_block encoded against its own scale (to nearest, or stochastically
// with the bits of `r`, the array's), decoded (block_q8.hpp's map is checked against an
// exhaustive search in test_block_q8.cpp).
inline std::vector<float> q8_rounded(const std::vector<double>& x, bool root,
                                     const kopt::Impl::ChunkRounding* r) {
  std::vector<float> out(x.begin(), x.end());
  float block[kopt::Impl::q8_block];
  std::vector<unsigned char> codes(kopt::Impl::q8_block_bytes);
  for (std::size_t b = 0; b < out.size(); b += kopt::Impl::q8_block) {
    const int n = static_cast<int>(std::min<std::size_t>(kopt::Impl::q8_block, out.size() - b));
    kopt::Impl::q8_encode_run(root, out.data() + b, codes.data(), n, r,
                              static_cast<std::int64_t>(b));
    kopt::Impl::q8_decode_run(root, codes.data(), block, n);
    std::copy(block, block + n, out.begin() + static_cast<std::ptrdiff_t>(b));
  }
  return out;
}

// 30 steps of `config` on params of sizes 0, 1, 17 and 1,000 with state stored as `storage`
// (each array in its dtype; under stochastic state rounding, the reference's values rounded
// with the bits kopt documents: seed, param name, step, array and element index): each
// step against `reference_step(t, p, g, s, uncertain)`, a double step from the widened state
// kopt held before it (s in, unrounded state out; uncertain[i]: a param the reference cannot
// predict, a sign of a near-zero interpolation for Lion). Every stored state element is the
// reference's rounded to nearest in its dtype (all but a few bitwise; none more than 1 ulp off,
// where fp32 and double arithmetic round a near-tie apart, unless a cancellation left it far below
// the values it came from and fp32's own error); every param matches to fp32 accuracy.
template <class Space, class Policy, class P, class Step>
void expect_steps_round_state(const typename Policy::Config& config,
                              const kopt::StateStorage& storage, Step&& reference_step) {
  const std::size_t sizes[] = {0, 1, 17, 1000};
  kopt::FusedOptimizer<Space, Policy> opt(Space(), config, "kopt::narrow_state", storage);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1, 1);
  auto [params, grads] = add_random_params<P, Space>(opt, sizes, rng);
  const unsigned kept = config.state_arrays();
  std::size_t exact = 0, total = 0, far = 0, param_misses = 0;
  for (int t = 1; t <= 30; ++t) {
    std::vector<Values> before;
    for (std::size_t j = 0; j < params.size(); ++j) {
      for (auto& x : grads[j]->host) x = kopt::Impl::from_float<P>(dist(rng));
      grads[j]->upload();
      before.push_back(read_values(opt, "p" + std::to_string(j), *params[j]));
    }
    opt.step();
    Kokkos::fence();
    for (std::size_t j = 0; j < params.size(); ++j) {
      const Values after = read_values(opt, "p" + std::to_string(j), *params[j]);
      const std::size_t n = sizes[j];
      std::vector<double> p(before[j].w.begin(), before[j].w.end()), g = widen(grads[j]->host);
      std::array<std::vector<double>, 3> s;
      for (std::size_t k = 0; k < 3; ++k) s[k].assign(before[j].s[k].begin(), before[j].s[k].end());
      std::vector<char> uncertain(n, 0);
      reference_step(t, p, g, s, uncertain);
      const kopt::Impl::ChunkRounding r{
          kopt::Impl::rounding_key(
              kopt::Impl::rounding_stream(storage.seed, "p" + std::to_string(j)), t),
          0};
      const bool stochastic = storage.state_rounding == kopt::Rounding::stochastic;
      std::array<std::vector<float>, 3> q8;  // the q8 arrays' expected values
      for (std::size_t k = 0; k < 3; ++k) {
        const kopt::Impl::ChunkRounding rk = r.of_array(static_cast<int>(k));
        if (storage.dtype_of(k) == kopt::DType::q8)
          q8[k] = q8_rounded(s[k], (kopt::Impl::q8_roots_of<Policy>() >> k & 1u) != 0,
                             stochastic ? &rk : nullptr);
      }
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t k = 0; k < 3; ++k) {
          if ((kept >> k & 1u) == 0) continue;
          // Beyond one ulp only by cancellation: fp32's error bound on an element computed
          // from the old value and the grad (m near 0 from m and g of opposite signs).
          const double scale = std::abs(before[j].s[k][i]) + std::abs(g[i]) + g[i] * g[i];
          if (storage.dtype_of(k) == kopt::DType::f32) {  // fp32 arithmetic, unrounded
            far += std::abs(after.s[k][i] - s[k][i]) > 1e-6 * scale;
            continue;
          }
          if (storage.dtype_of(k) == kopt::DType::q8) {  // the same code, or a neighbour's
            const double want = q8[k][i], got = after.s[k][i];
            const std::size_t b = i / kopt::Impl::q8_block * kopt::Impl::q8_block;
            double block_max = 0;
            for (std::size_t j = b; j < std::min(n, b + kopt::Impl::q8_block); ++j)
              block_max = std::max(block_max, std::abs(static_cast<double>(q8[k][j])));
            exact += got == want;
            far += std::abs(got - want) > 0.13 * std::abs(want) + 1e-5 * block_max;
            ++total;
            continue;
          }
          const std::int64_t want = state_bits(storage.dtype_of(k), s[k][i], stochastic,
                                               r.array_bits(static_cast<int>(k), i));
          const std::int64_t d =
              std::abs(want - state_bits(storage.dtype_of(k), after.s[k][i], false, 0));
          exact += d == 0;
          far += d > 1 && std::abs(after.s[k][i] - s[k][i]) > 1e-6 * scale;
          ++total;
        }
        const double moved = std::abs(p[i] - before[j].w[i]);
        const double tol = 1e-6 * std::abs(before[j].w[i]) + 1e-4 * moved + 1e-30;
        if (!uncertain[i] && !(std::abs(after.w[i] - p[i]) <= tol)) ++param_misses;
      }
    }
  }
  EXPECT_EQ(far, 0u) << "state elements more than one ulp of their dtype from the reference's";
  EXPECT_GE(exact, total - total / 100) << "of " << total << " state elements";
  EXPECT_GT(total, 0u);
  EXPECT_EQ(param_misses, 0u) << "params off the reference";
}

}  // namespace kopt_test
