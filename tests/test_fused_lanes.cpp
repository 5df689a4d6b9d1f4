// The host loop of fp32-state forms (kopt/impl/host_loops.hpp, with its lane loop
// kopt/impl/fused_lanes.hpp where the build has vector extensions) against fused_element,
// element by element: for f32 and bf16 params and grads with an fp32 master, a remainder or
// none (to nearest, stochastically: element indices small and crossing 2^32), Adam with and without
// amsgrad, chunk sizes around the vector width and chunks that start at odd elements, three steps
// must leave bitwise the same params, masters and state. Some vectors hold grads that overflow
// Adam's interpolations (1e20, scaled by 0.5: its square is inf, and v stays finite only through
// the guard; inf; NaN), so the guarded rerun of one vector is checked; every 89th element is a
// subnormal param with a zero grad and no state, whose bf16 rounding the CPU's conversion (AVX-512
// BF16) would flush to zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <kopt/impl/policies.hpp>
#include <kopt/impl/update_kernel.hpp>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "lane_inputs.hpp"

namespace {
namespace test_fused_lanes {

using namespace kopt;
using namespace kopt::Impl;

// Every stream of one chunk, as the loop sees it.
template <class ParamT, class GradT, class MasterT>
struct Streams {
  std::vector<ParamT> param;
  std::vector<GradT> grad;
  std::vector<MasterT> master;  // empty without a stored master
  std::vector<float> s0, s1, s2;

  bool operator==(const Streams& o) const {
    const auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0);
    };
    return same(param, o.param) && same(master, o.master) && same(s0, o.s0) && same(s1, o.s1) &&
           same(s2, o.s2);
  }
};

template <class ParamT, class GradT, class MasterT>
Streams<ParamT, GradT, MasterT> random_streams(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Streams<ParamT, GradT, MasterT> s;
  for (std::int64_t i = 0; i < n; ++i) {
    const kopt_test::LaneElement e = kopt_test::lane_element(i, rng);
    kopt_test::push_master(s.param, s.master, e.w);
    s.grad.push_back(from_float<GradT>(e.g));
    s.s0.push_back(e.m);
    s.s1.push_back(e.v);
    s.s2.push_back(e.max);
  }
  return s;
}

template <class Policy, int V, class ParamT, class GradT, class F, class S>
void run(S& s, std::int64_t begin, const typename Policy::Scalars& scalars, const ChunkRounding& r,
         bool loop) {
  const auto n = static_cast<std::int64_t>(s.param.size());
  auto* master = s.master.empty() ? nullptr : s.master.data();
  if (loop) {
    fused_host_loop<Policy, V, ParamT, GradT, F>(begin, n, s.param.data(), s.grad.data(), master,
                                                 s.s0.data(), s.s1.data(), s.s2.data(), scalars, r);
  } else {
    for (std::int64_t i = begin; i < n; ++i)
      fused_element<Policy, V, ParamT, GradT, F>(i, s.param.data(), s.grad.data(), master,
                                                 s.s0.data(), s.s1.data(), s.s2.data(), scalars, r);
  }
}

template <class ParamT, class GradT, class MasterT>
void expect_loop_like_elements(const AdamConfig& config) {
  using F = Form<MasterT, float>;
  visit_variant<AdamPolicy>(AdamPolicy::variant(config), [&](auto v) {
    constexpr int V = decltype(v)::value;
#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
    static_assert(fused_lanes_form<AdamPolicy, V, ParamT, GradT, F>);
#endif
    for (const std::int64_t n : {0, 1, 7, 15, 16, 17, 31, 33, 255, 257, 1000, 4097}) {
      for (const std::int64_t begin : {std::int64_t{0}, std::int64_t{1}}) {
        if (begin > n) continue;
        // Stochastic rounding's indices: small, and crossing 2^32 within a vector.
        for (const std::int64_t first : {std::int64_t{12345}, (std::int64_t{1} << 32) - 37}) {
          auto loop =
              random_streams<ParamT, GradT, MasterT>(n, static_cast<unsigned>(n * 2 + begin));
          auto elements = loop;
          for (std::int64_t t = 1; t <= 3; ++t) {
            const auto scalars = AdamPolicy::scalars(config, t, 0.5);
            const ChunkRounding r{rounding_key(0x5eed, t), first};
            run<AdamPolicy, V, ParamT, GradT, F>(loop, begin, scalars, r, true);
            run<AdamPolicy, V, ParamT, GradT, F>(elements, begin, scalars, r, false);
          }
          EXPECT_TRUE(loop == elements)
              << "variant " << V << ", " << n << " elements from " << begin << ", index " << first;
        }
      }
    }
  });
}

template <class ParamT, class GradT, class MasterT>
void expect_both_configs() {
  expect_loop_like_elements<ParamT, GradT, MasterT>(kopt_test::lane_adamw);
  expect_loop_like_elements<ParamT, GradT, MasterT>(kopt_test::lane_amsgrad_l2);
  expect_loop_like_elements<ParamT, GradT, MasterT>(kopt_test::lane_amsgrad_adamw);
}

TEST(FusedLanes, Fp32ParamsMatchTheElementUpdateBitwise) {
  expect_both_configs<float, float, float>();
  expect_both_configs<float, bfloat16, float>();
}
TEST(FusedLanes, Fp32MastersMatchTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, float>();
  expect_both_configs<bfloat16, float, float>();
}
TEST(FusedLanes, RemaindersMatchTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, std::uint16_t>();
}
TEST(FusedLanes, NoMasterToNearestMatchesTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, RoundToNearest>();
  expect_both_configs<float, float, RoundToNearest>();
}
TEST(FusedLanes, NoMasterStochasticMatchesTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, RoundStochastic>();
}

}  // namespace test_fused_lanes
}  // namespace
