// Stochastic rounding of bf16, f16 and q8 state arrays (StateStorage::state_rounding): the
// 16-bit rounding functions against each value's neighbours and odds, computed in double, for
// every one of the 65536 random values (q8's: test_block_q8.cpp); engine steps against a
// double reference rounded with the bits kopt documents; 16- and 8-bit moments that follow
// the fp32 averages where, rounded to nearest, they stall; and the options' bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <kopt/impl/fused_optimizer_def.hpp>
#include <kopt/impl/stochastic_rounding.hpp>
#include <limits>
#include <random>
#include <vector>

#include "reference_steps.hpp"
#include "rounded_state_check.hpp"
#include "test_support.hpp"

namespace {
namespace test_state_rounding {

using namespace kopt_test;
using kopt::DType;
using kopt::MasterStorage;
using kopt::Rounding;

// Every finite non-negative value of T, as doubles: the order of their encodings.
template <class T>
std::vector<double> finite_values() {
  const std::uint32_t inf = std::is_same_v<T, kopt::bfloat16> ? 0x7f80u : 0x7c00u;
  std::vector<double> v;
  for (std::uint32_t b = 0; b < inf; ++b)
    v.push_back(kopt::Impl::to_float(T{static_cast<std::uint16_t>(b)}));
  return v;
}

// For `x` and each of the 65536 values of the random bits: the result is x's neighbour
// towards zero or away from it (Inf past the largest finite value), and it is the one away
// from zero for exactly floor(65536 d / ulp) of them, d the distance from the one towards zero.
template <class T, class Round>
void expect_neighbours_and_odds(float x, const std::vector<double>& values, Round&& round) {
  const double a = std::abs(static_cast<double>(x));
  const std::size_t below = static_cast<std::size_t>(
      std::upper_bound(values.begin(), values.end(), a) - values.begin() - 1);
  const std::uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double top_ulp = values.back() - values[values.size() - 2];
  const double up = below + 1 < values.size() ? values[below + 1] : values.back() + top_ulp;
  const double odds = std::min(1.0, (a - values[below]) / (up - values[below]));
  const auto expected_ups = static_cast<std::uint32_t>(std::floor(65536.0 * odds));
  std::uint32_t ups = 0, strays = 0;
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const std::uint32_t r = round(x, bits);
    if (r == (sign | static_cast<std::uint32_t>(below + 1)))
      ++ups;
    else if (r != (sign | static_cast<std::uint32_t>(below)))
      ++strays;
  }
  EXPECT_EQ(strays, 0u) << x;
  EXPECT_EQ(ups, expected_ups) << x << " (odds " << odds << ")";
}

// Values of every magnitude: random exponents over the type's range and beyond it, the
// type's own values, midpoints, its largest values and past them, and specials.
std::vector<float> samples(int low_exponent, int high_exponent, float largest) {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> exponent(low_exponent, high_exponent);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> out = {0.0f,
                            -0.0f,
                            1.0f,
                            1.5f,
                            1.00390625f,
                            largest,
                            -largest,
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            std::ldexp(1.0f, -40),
                            std::ldexp(1.0f, -41),
                            std::ldexp(3.0f, -26),
                            std::ldexp(1.0f, -24)};
  for (int i = 0; i < 400; ++i) {
    const float x = std::ldexp(mantissa(rng), exponent(rng));
    out.push_back(i % 2 ? -x : x);
  }
  return out;
}

TEST(StochasticStateRounding, Bf16TakesANeighbourWithTheOddsOfItsDistance) {
  const std::vector<double> values = finite_values<kopt::bfloat16>();
  const float largest = static_cast<float>(values.back());
  for (const float x : samples(-140, 127, largest))
    expect_neighbours_and_odds<kopt::bfloat16>(x, values, [](float v, std::uint32_t bits) {
      return std::uint32_t{kopt::Impl::round_stochastic(v, bits).bits};
    });
}

TEST(StochasticStateRounding, F16TakesANeighbourWithTheOddsOfItsDistanceToSixteenBits) {
  const std::vector<double> values = finite_values<kopt::float16>();
  for (const float x : samples(-45, 17, 65504.0f))
    expect_neighbours_and_odds<kopt::float16>(x, values, [](float v, std::uint32_t bits) {
      return std::uint32_t{kopt::Impl::round_stochastic_f16(v, bits).bits};
    });
  // Inf stays Inf and NaN becomes what rounding to nearest gives, whatever the bits.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::uint32_t bits : {0u, 1u, 32767u, 65535u}) {
    EXPECT_EQ(kopt::Impl::round_stochastic_f16(inf, bits).bits, 0x7c00u);
    EXPECT_EQ(kopt::Impl::round_stochastic_f16(-inf, bits).bits, 0xfc00u);
    EXPECT_EQ(kopt::Impl::round_stochastic_f16(nan, bits).bits,
              kopt::float16::from_float(nan).bits);
    EXPECT_EQ(kopt::Impl::round_stochastic(-nan, bits).bits, kopt::bfloat16::from_float(-nan).bits);
  }
}

kopt::StateStorage stochastic(MasterStorage master, DType arrays, std::uint64_t seed,
                              std::array<std::optional<DType>, 3> per_array = {}) {
  return {.master = master,
          .arrays = arrays,
          .seed = seed,
          .state_rounding = Rounding::stochastic,
          .array_dtypes = per_array};
}

template <class Space>
class StateRounding : public ::testing::Test {};
TYPED_TEST_SUITE(StateRounding, EnabledSpaces, SpaceName);

// Every step of every storage form against the double reference, its new state rounded with
// the bits of (seed, param name, step, array, element index): all bf16 arrays (the loop that
// converts in registers, were they rounded to nearest), f16 arrays, bf16 m beside f32 v, and
// SGD's momentum through the staged loop, Adagrad's sums; f32, bf16 and f16 params; with
// masters and remainders. (Without masters, whose params this reference cannot predict, the
// arrays are checked bitwise across paths: test_team_paths.cpp, the MPI tests.)
TYPED_TEST(StateRounding, StepsMatchTheReferenceRoundedWithTheSameBits) {
  using Space = TypeParam;
  using namespace kopt::Impl;
  for (const kopt::AdamConfig c :
       {kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.01},
        kopt::AdamConfig{.lr = 1e-2, .weight_decay = 0.1, .decoupled = false, .amsgrad = true}}) {
    SCOPED_TRACE(c.amsgrad ? "amsgrad" : "adamw");
    const ReferenceStep step = adam_step(c);
    expect_steps_round_state<Space, AdamPolicy, kopt::bfloat16>(
        c, stochastic(MasterStorage::remainder, DType::bf16, 3), step);
    expect_steps_round_state<Space, AdamPolicy, float>(
        c, stochastic(MasterStorage::f32, DType::f16, 4), step);
    expect_steps_round_state<Space, AdamPolicy, kopt::float16>(
        c, stochastic(MasterStorage::f32, DType::bf16, 5, {std::nullopt, DType::f32}), step);
    // q8 blocks, each code one of its value's two neighbours (the lanes for whole blocks, the
    // staging for a last partial one); beside a bf16 m.
    expect_steps_round_state<Space, AdamPolicy, float>(
        c, stochastic(MasterStorage::f32, DType::q8, 6), step);
    expect_steps_round_state<Space, AdamPolicy, kopt::bfloat16>(
        c, stochastic(MasterStorage::remainder, DType::q8, 10, {DType::bf16}), step);
  }
  const kopt::SgdConfig sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  expect_steps_round_state<Space, SgdPolicy, kopt::bfloat16>(
      sgd, stochastic(MasterStorage::remainder, DType::f16, 7), sgd_step(sgd));
  const kopt::AdagradConfig adagrad{.lr = 0.05, .initial_accumulator_value = 0.1};
  expect_steps_round_state<Space, AdagradPolicy, float>(
      adagrad, stochastic(MasterStorage::f32, DType::bf16, 8), adagrad_step(adagrad));
}

// The point of it: under steady grads a slow average (beta2 = 0.999) rounded to nearest loses
// every change below half a unit, so a bf16 v stalls far below the true one, an f16 v of
// small grads stays 0, and a q8 v (1/32 of its root a unit) near its first steps' values;
// a q8 m (beta1 = 0.9, 1/16 a unit) stops short of the grad. Rounded stochastically, each
// store is right in expectation and the stored averages follow the fp32 ones (their means
// over 4,096 elements within 2%, 5% for the f16 subnormals, whose bits resolve their odds
// to 2^-16 of a unit).
TYPED_TEST(StateRounding, SlowAveragesFollowTheFp32OneWhereToNearestTheyStall) {
  using Space = TypeParam;
  using Opt = kopt::FusedOptimizer<Space, kopt::Impl::AdamPolicy>;
  const std::size_t n = 4096;
  const int steps = 2000;
  const kopt::AdamConfig adam{.lr = 1e-4, .beta2 = 0.999};
  for (const DType dtype : {DType::bf16, DType::f16, DType::q8}) {
    // bf16, q8: |g| in [0.1, 1]; f16: in [3e-4, 2e-3], where (1 - beta2) g^2 is below f16's
    // least subnormal (6e-8) and v's own values are subnormal.
    const double low = dtype == DType::f16 ? 3e-4 : 0.1, high = dtype == DType::f16 ? 2e-3 : 1;
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> mag(low, high);
    SpaceArray<float, Space> grad(n), param(n);
    for (std::size_t i = 0; i < n; ++i)
      grad.host[i] = static_cast<float>(i % 2 ? mag(rng) : -mag(rng));
    grad.upload();
    double ratio[2] = {}, m_ratio[2] = {};
    for (const Rounding r : {Rounding::nearest, Rounding::stochastic}) {
      SCOPED_TRACE(std::string(kopt::name_of(dtype)) + ", " + kopt::name_of(r));
      kopt::StateStorage storage{.arrays = dtype};
      storage.state_rounding = r;
      storage.seed = r == Rounding::stochastic ? 9 : 0;
      std::fill(param.host.begin(), param.host.end(), 0.0f);
      param.upload();
      Opt opt(Space(), adam, "slow_average", storage);
      opt.add("w", param.tensor(), grad.tensor());
      for (int t = 0; t < steps; ++t) opt.step();
      Kokkos::fence();
      std::vector<float> m(n), v(n);
      opt.read_state("w", 0, static_cast<std::int64_t>(n), {m.data(), v.data(), nullptr, nullptr});
      double stored = 0, exact = 0, stored_m = 0, exact_m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double g = grad.host[i];
        stored += v[i];
        exact += (1 - std::pow(0.999, steps)) * g * g;
        stored_m += std::abs(m[i]), exact_m += std::abs(g);  // 0.9^2000: m is g
      }
      ratio[r == Rounding::stochastic] = stored / exact;
      m_ratio[r == Rounding::stochastic] = stored_m / exact_m;
      std::printf("%s, %s: stored / exact v %.4f, m %.4f\n", name_of(dtype), name_of(r),
                  stored / exact, stored_m / exact_m);
    }
    EXPECT_LT(ratio[0], dtype == DType::f16 ? 0.01 : 0.6) << "to nearest, " << name_of(dtype);
    EXPECT_NEAR(ratio[1], 1.0, dtype == DType::f16 ? 0.05 : 0.02)
        << "stochastically, " << name_of(dtype);
    if (dtype == DType::q8) {
      EXPECT_LT(m_ratio[0], 0.9) << "q8 m to nearest";
      EXPECT_NEAR(m_ratio[1], 1.0, 0.02) << "q8 m stochastically";
    }
  }
}

TEST(StateRoundingOptions, OneSeedPerGroupAndBadInputRefusedNamingIt) {
  kopt::ParamGroup group;
  expect_error<kopt::InvalidArgument>([&] { group.set_state_rounding(Rounding::stochastic, 1); },
                                      "every state array f32");
  group.set_state_dtype(DType::bf16).set_state_dtype("exp_avg_sq", DType::f32);
  expect_error<kopt::InvalidArgument>([&] { group.set_state_rounding(Rounding::nearest, 3); },
                                      "StateStorage.seed = 3");
  expect_error<kopt::InvalidArgument>([&] { group.set_state_rounding(static_cast<Rounding>(4)); },
                                      "invalid Rounding 4");
  const kopt::StateStorage before = group.storage();
  group.set_state_rounding(Rounding::stochastic, 11);
  EXPECT_EQ(group.state_rounding(), Rounding::stochastic);
  EXPECT_EQ(group.storage().seed, 11u);
  // Then every array f32: refused, the group unchanged.
  expect_error<kopt::InvalidArgument>([&] { group.set_state_dtype(DType::f32); },
                                      "every state array f32");
  EXPECT_EQ(group.storage().dtype_of(0), DType::bf16);
  // One seed: the params' stochastic rounding sets it for both; nearest there, or another
  // master form, leaves the arrays' seed.
  group.set_master(MasterStorage::none).set_rounding(Rounding::stochastic, 12);
  EXPECT_EQ(group.storage().seed, 12u);
  group.set_rounding(Rounding::nearest);
  EXPECT_EQ(group.storage().seed, 12u);
  group.set_master(MasterStorage::remainder);
  EXPECT_EQ(group.storage().seed, 12u);
  EXPECT_EQ(group.state_rounding(), Rounding::stochastic);
  group.set_state_rounding(Rounding::nearest);
  EXPECT_EQ(group.storage().seed, 0u);
  kopt::StateStorage expected = before;
  expected.master = MasterStorage::remainder;
  EXPECT_EQ(group.storage(), expected);
  // q8 arrays round stochastically too, beside others and alone.
  kopt::ParamGroup q8;
  q8.set_state_dtype("exp_avg", DType::q8).set_state_rounding(Rounding::stochastic, 13);
  q8.set_state_dtype(DType::q8);
  EXPECT_EQ(q8.state_rounding(), Rounding::stochastic);
  EXPECT_EQ(q8.storage().seed, 13u);
  expect_error<kopt::InvalidArgument>([&] { q8.set_state_dtype(DType::f32); },
                                      "every state array f32");
}

}  // namespace test_state_rounding
}  // namespace
