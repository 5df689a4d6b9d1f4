// The host loop of 16-bit state arrays (narrow_host_loop, kopt/impl/host_loops.hpp: the lane
// loop reading each array in its own dtype, kopt/impl/narrow_lanes.hpp, where the build has
// vector extensions, and the staging through fp32 scratch for the rest) against
// narrow_element, the devices' update of one element, bitwise: Adam with and without amsgrad,
// every mix of f32, bf16 and f16 arrays the kernel can get (a dtype switch that read one
// array as another's dtype fails it), f32 and bf16 params and grads, an fp32 master, a
// remainder or none (to nearest, stochastically), chunk sizes around the vector width and
// chunks that start at odd elements, three steps. Overflowing, infinite and NaN grads rerun a
// vector guarded; subnormal params, moments that are subnormal in bf16 (which AVX-512 BF16's
// conversion would flush) and in f16 (most of v: F16C keeps them) are in every run.
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
namespace test_narrow_lanes {

using namespace kopt;
using namespace kopt::Impl;

template <class ParamT, class GradT, class MasterT>
struct Streams {
  std::vector<ParamT> param;
  std::vector<GradT> grad;
  std::vector<MasterT> master;                   // empty without a stored master
  std::vector<std::vector<unsigned char>> s{3};  // each array's bytes in its dtype

  bool operator==(const Streams& o) const {
    const auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof a[0]) == 0);
    };
    return same(param, o.param) && same(master, o.master) && s == o.s;
  }
};

void put(DType dtype, std::vector<unsigned char>& bytes, float x) {
  const std::size_t at = bytes.size();
  if (dtype == DType::f32) {
    bytes.resize(at + 4);
    std::memcpy(bytes.data() + at, &x, 4);
    return;
  }
  // A bf16 NaN keeps its bits (a signaling one stays signaling, as a loaded file may hold).
  std::uint32_t top;
  std::memcpy(&top, &x, 4);
  const std::uint16_t bits =
      dtype == DType::bf16
          ? (std::isnan(x) ? static_cast<std::uint16_t>(top >> 16) : bfloat16::from_float(x).bits)
          : float16::from_float(x).bits;
  bytes.resize(at + 2);
  std::memcpy(bytes.data() + at, &bits, 2);
}

template <class ParamT, class GradT, class MasterT>
Streams<ParamT, GradT, MasterT> random_streams(std::int64_t n, const StateDTypes& d,
                                               unsigned seed) {
  std::mt19937 rng(seed);
  Streams<ParamT, GradT, MasterT> s;
  for (std::int64_t i = 0; i < n; ++i) {
    const kopt_test::LaneElement e = kopt_test::lane_element(i, rng);
    kopt_test::push_master(s.param, s.master, e.w);
    s.grad.push_back(from_float<GradT>(e.g));
    put(d.of[0], s.s[0], e.m);
    put(d.of[1], s.s[1], e.v);
    put(d.of[2], s.s[2], e.max);
  }
  return s;
}

template <int V, class ParamT, class GradT, class F, class S>
void run(S& s, std::int64_t begin, const StateDTypes& d, const AdamStepScalars& scalars,
         const ChunkRounding& r, bool loop) {
  const auto n = static_cast<std::int64_t>(s.param.size());
  auto* master = s.master.empty() ? nullptr : s.master.data();
  void* a[3] = {s.s[0].data(), s.s[1].data(), s.s[2].data()};
  if (loop) {
    narrow_host_loop<AdamPolicy, V, ParamT, GradT, F>(begin, n, s.param.data(), s.grad.data(),
                                                      master, a[0], a[1], a[2], d, scalars, r);
  } else {
    for (std::int64_t i = begin; i < n; ++i)
      narrow_element<AdamPolicy, V, ParamT, GradT, F>(i, s.param.data(), s.grad.data(), master,
                                                      a[0], a[1], a[2], d, scalars, r);
  }
}

StateDTypes dtypes(DType m, DType v, DType vmax) {
  StateDTypes d;
  d.of[0] = m, d.of[1] = v, d.of[2] = vmax;
  return d;
}

template <class ParamT, class GradT, class MasterT>
void expect_loop_like_elements(const AdamConfig& config) {
  using F = Form<MasterT, NarrowState>;
  constexpr auto f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  visit_variant<AdamPolicy>(AdamPolicy::variant(config), [&](auto v) {
    constexpr int V = decltype(v)::value;
    for (const StateDTypes d : {dtypes(bf16, f32, f16), dtypes(f16, f16, f16),
                                dtypes(f16, bf16, bf16), dtypes(f32, f16, bf16)}) {
      for (const std::int64_t n : {0, 1, 7, 15, 16, 17, 33, 255, 257, 1000, 4097}) {
        for (const std::int64_t begin : {std::int64_t{0}, std::int64_t{1}}) {
          if (begin > n) continue;
          const auto seed = static_cast<unsigned>(n * 2 + begin);
          auto loop = random_streams<ParamT, GradT, MasterT>(n, d, seed);
          auto elements = loop;
          for (std::int64_t t = 1; t <= 3; ++t) {
            const auto scalars = AdamPolicy::scalars(config, t, 0.5);
            const ChunkRounding r{rounding_key(0x5eed, t), (std::int64_t{1} << 32) - 37};
            run<V, ParamT, GradT, F>(loop, begin, d, scalars, r, true);
            run<V, ParamT, GradT, F>(elements, begin, d, scalars, r, false);
          }
          EXPECT_TRUE(loop == elements)
              << "variant " << V << ", dtypes " << name_of(d.of[0]) << " " << name_of(d.of[1])
              << " " << name_of(d.of[2]) << ", " << n << " elements from " << begin;
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

TEST(NarrowLanes, Fp32ParamsMatchTheElementUpdateBitwise) {
  expect_both_configs<float, float, float>();
  expect_both_configs<float, bfloat16, float>();
}
TEST(NarrowLanes, Fp32MastersMatchTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, float>();
  expect_both_configs<bfloat16, float, float>();
}
TEST(NarrowLanes, RemaindersMatchTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, std::uint16_t>();
}
TEST(NarrowLanes, NoMasterMatchesTheElementUpdateBitwise) {
  expect_both_configs<bfloat16, bfloat16, RoundToNearest>();
  expect_both_configs<bfloat16, bfloat16, RoundStochastic>();
}

}  // namespace test_narrow_lanes
}  // namespace
