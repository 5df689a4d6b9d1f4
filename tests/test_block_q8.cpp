// The q8 code (kopt/impl/block_q8.hpp) against an exhaustive search in double: every
// encoded magnitude is the nearest code value (ties to the even code), every block's scale
// the least power of two its largest magnitude fits under, a block's decoded values encode
// to the same values again (what makes a checkpoint of decoded values resume bitwise), the
// round trip is within the documented error, and Inf or NaN poisons its block only; rounded
// stochastically, every magnitude gets one of its two neighbouring codes with the documented
// odds, for all 65,536 random values.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <kopt/impl/block_q8.hpp>
#include <limits>
#include <random>
#include <vector>

namespace {
namespace test_block_q8 {

using kopt::Impl::q8_block;
using kopt::Impl::q8_block_bytes;
using kopt::Impl::Q8Map;

// The value of every magnitude code, from the map's definition alone: 4 exponent bits,
// exponents 2^-14 .. 2^0, subnormals f / 2^M x 2^-14.
template <bool Root>
std::vector<double> code_values() {
  constexpr int m = Root ? 4 : 3;
  std::vector<double> v;
  for (int c = 0; c <= static_cast<int>(Q8Map<Root>::top); ++c) {
    const int e = c >> m, f = c & ((1 << m) - 1);
    v.push_back(e == 0 ? std::ldexp(f, -14 - m) : std::ldexp(1.0 + std::ldexp(f, -m), e - 15));
  }
  return v;
}

// The nearest code to y by search; a tie goes to the even code.
template <bool Root>
std::uint32_t nearest_code(double y) {
  static const std::vector<double> values = code_values<Root>();
  std::uint32_t best = 0;
  for (std::uint32_t c = 1; c < values.size(); ++c) {
    const double d = std::abs(values[c] - y), b = std::abs(values[best] - y);
    if (d < b || (d == b && c % 2 == 0)) best = c;
  }
  return best;
}

template <bool Root>
void check_codes() {
  const std::vector<double> values = code_values<Root>();
  for (std::uint32_t c = 0; c < values.size(); ++c)
    ASSERT_EQ(static_cast<double>(Q8Map<Root>::value(c)), values[c]) << "code " << c;
  // Past the largest value (never so within a block, but for rounding's sake) it saturates.
  EXPECT_EQ(Q8Map<Root>::code(std::numeric_limits<float>::infinity()), Q8Map<Root>::top);
  std::vector<float> ys = {0.0f, static_cast<float>(values.back()), 3.0f};
  for (std::size_t c = 0; c + 1 < values.size(); ++c) {  // every midpoint and its neighbours
    const auto mid = static_cast<float>((values[c] + values[c + 1]) / 2);
    ys.insert(ys.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 4.0f)});
  }
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(0.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 0);
  for (int i = 0; i < 200000; ++i) ys.push_back(std::ldexp(unit(gen), exponent(gen)));
  for (const float y : ys) ASSERT_EQ(Q8Map<Root>::code(y), nearest_code<Root>(y)) << "y = " << y;
}

TEST(BlockQ8, EveryMagnitudeGetsTheNearestCode) {
  check_codes<false>();
  check_codes<true>();
}

// Stochastically (StateStorage::state_rounding): y between the values lo < hi of codes c and
// c + 1 (by search) becomes c for some of the 65,536 random values and c + 1 for the others,
// for floor(65536 t) of them, t = (y - lo) / (hi - lo), of the squares for a root map (whose
// decoded values are the squares: each then right in expectation). t is computed here in
// double, by kopt in float: one value of the bits either way is allowed. A code's own value
// and the largest stay themselves; NaN gets a code (its block's NaN scale decodes it).
template <bool Root>
void check_stochastic_codes() {
  const std::vector<double> values = code_values<Root>();
  std::vector<float> ys = {0.0f, static_cast<float>(values.back()),
                           static_cast<float>(values[1] / 3), std::nanf("")};
  for (std::size_t c = 0; c + 1 < values.size(); ++c)
    for (const double at : {0.0, 0.25, 0.5, 0.999})
      ys.push_back(static_cast<float>(values[c] + at * (values[c + 1] - values[c])));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.875f);
  std::uniform_int_distribution<int> exponent(-24, 0);
  for (int i = 0; i < 300; ++i) ys.push_back(std::ldexp(unit(gen), exponent(gen)));
  for (const float y : ys) {
    if (std::isnan(y)) {
      EXPECT_LE(Q8Map<Root>::code_stochastic(y, 0), Q8Map<Root>::top);
      continue;
    }
    const std::size_t c = static_cast<std::size_t>(
        std::upper_bound(values.begin(), values.end(), static_cast<double>(y)) - values.begin() -
        1);
    const double lo = values[c], hi = c + 1 < values.size() ? values[c + 1] : lo;
    const auto q = [](double v) { return Root ? v * v : v; };
    const double t = hi > lo ? (q(y) - q(lo)) / (q(hi) - q(lo)) : 0.0;
    const auto want = static_cast<std::int64_t>(std::floor(65536.0 * t));
    std::int64_t ups = 0, strays = 0;
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      const std::uint32_t code = Q8Map<Root>::code_stochastic(y, bits);
      ups += code == c + 1;
      strays += code != c && code != c + 1;
    }
    ASSERT_EQ(strays, 0) << "y = " << y;
    if (y == lo) {
      ASSERT_EQ(ups, 0) << "y = " << y << " is a code's value";
    }
    ASSERT_LE(std::abs(ups - want), 1) << "y = " << y << ", t = " << t;
  }
  // A signed array's code carries the sign; the magnitude's code is rounded alike.
  for (const std::uint32_t bits : {0u, 30000u, 65535u})
    EXPECT_EQ(kopt::Impl::q8_encode_stochastic<false>(-0.3f, 1.0f, bits),
              0x80u | kopt::Impl::q8_encode_stochastic<false>(0.3f, 1.0f, bits));
}

TEST(BlockQ8, StochasticCodesTakeANeighbourWithTheOddsOfTheirDecodedValues) {
  check_stochastic_codes<false>();
  check_stochastic_codes<true>();
}

template <bool Root>
void check_scales() {
  const double top = code_values<Root>().back();
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  std::uniform_int_distribution<int> exponent(-140, 126);
  std::vector<float> maxes = {0.0f,
                              std::numeric_limits<float>::denorm_min(),
                              1e-38f,
                              static_cast<float>(top),
                              std::nextafter(static_cast<float>(top), 2.0f),
                              std::numeric_limits<float>::max()};
  for (int i = 0; i < 100000; ++i) maxes.push_back(std::ldexp(unit(gen), exponent(gen)));
  for (const float amax : maxes) {
    const float scale = Q8Map<Root>::scale(std::bit_cast<std::uint32_t>(amax));
    int e = 0;
    ASSERT_EQ(std::frexp(scale, &e), 0.5f) << amax << ": not a power of two";
    const double s = scale;
    if (amax > top * std::ldexp(1.0, 127)) {  // beyond the largest scale: clamped
      ASSERT_EQ(s, std::ldexp(1.0, 127));
      continue;
    }
    ASSERT_LE(amax, top * s) << amax;
    if (s > std::ldexp(1.0, -126)) {
      ASSERT_GT(amax, top * s / 2) << amax << ": not the least";
    }
  }
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")})
    EXPECT_TRUE(std::isnan(Q8Map<Root>::scale(std::bit_cast<std::uint32_t>(bad))));
}

TEST(BlockQ8, EveryScaleIsTheLeastPowerOfTwoOverTheBlock) {
  check_scales<false>();
  check_scales<true>();
}

// A block of n values spread over `decades` below their largest, signed or not.
std::vector<float> random_block(int n, bool root, std::uint32_t seed, int decades = 6) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> unit(1.0f, 10.0f);
  std::uniform_int_distribution<int> power(-decades, 0);
  std::uniform_int_distribution<int> shift(-40, 20);
  const float at = std::ldexp(1.0f, shift(gen));
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) {
    v = at * unit(gen) * std::pow(10.0f, static_cast<float>(power(gen)));
    if (!root && gen() % 2 == 0) v = -v;
  }
  return x;
}

template <bool Root>
void check_round_trips() {
  int same_bytes = 0;
  for (const int n : {1, 2, 17, 255, 256}) {
    for (std::uint32_t seed = 0; seed < 40; ++seed) {
      const std::vector<float> x = random_block(n, Root, seed + 100 * n);
      std::vector<unsigned char> block(q8_block_bytes, 0xab);
      kopt::Impl::q8_encode_run<Root>(x.data(), block.data(), n);
      for (int j = n; j < q8_block; ++j) ASSERT_EQ(block[j], 0xab) << "code past the run";
      std::vector<float> y(static_cast<std::size_t>(n)), z(y.size());
      kopt::Impl::q8_decode_run<Root>(block.data(), y.data(), n);
      const float scale = kopt::Impl::q8_scale_of(block.data());
      for (int j = 0; j < n; ++j) {
        // Stored value (the root of a Root array) within half a code step: 1/16 of it (M = 3)
        // or 1/32 (M = 4) in the normal range, half a subnormal step below it.
        const double stored = Root ? std::sqrt(static_cast<double>(x[j])) : x[j];
        const double back = Root ? std::sqrt(static_cast<double>(y[j])) : y[j];
        const double step = Root ? 1.0 / 32 : 1.0 / 16;
        const double floor = std::ldexp(static_cast<double>(scale), Root ? -19 : -18);
        ASSERT_LE(std::abs(back - stored), std::max(step * std::abs(stored), floor) * 1.0001)
            << "n " << n << " seed " << seed << " [" << j << "] " << x[j] << " -> " << y[j];
        ASSERT_EQ(std::signbit(y[j]), std::signbit(x[j])) << j;
      }
      // Decoded values encode to the same values (the same bytes, or where the largest
      // rounded down to half the top value, a scale half as large and codes one exponent up).
      std::vector<unsigned char> again(q8_block_bytes, 0xab);
      kopt::Impl::q8_encode_run<Root>(y.data(), again.data(), n);
      kopt::Impl::q8_decode_run<Root>(again.data(), z.data(), n);
      for (int j = 0; j < n; ++j)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(z[j]), std::bit_cast<std::uint32_t>(y[j]))
            << "n " << n << " seed " << seed << " [" << j << "]";
      same_bytes += again == block;
    }
  }
  EXPECT_GT(same_bytes, 150) << "of 200 blocks";
}

TEST(BlockQ8, RoundTripsAreWithinHalfACodeStepAndEncodeAgainToTheSameValues) {
  check_round_trips<false>();
  check_round_trips<true>();
}

TEST(BlockQ8, ZerosStayZerosAndInfOrNanPoisonsItsBlockOnly) {
  std::vector<float> x(q8_block, 0.0f), y(q8_block);
  std::vector<unsigned char> block(q8_block_bytes);
  kopt::Impl::q8_encode_run<false>(x.data(), block.data(), q8_block);
  kopt::Impl::q8_decode_run<false>(block.data(), y.data(), q8_block);
  for (const float v : y) ASSERT_EQ(v, 0.0f);
  x[3] = std::numeric_limits<float>::infinity();
  for (const bool root : {false, true}) {
    kopt::Impl::q8_encode_run(root, x.data(), block.data(), q8_block);
    kopt::Impl::q8_decode_run(root, block.data(), y.data(), q8_block);
    for (const float v : y) ASSERT_TRUE(std::isnan(v));
  }
}

}  // namespace test_block_q8
}  // namespace
