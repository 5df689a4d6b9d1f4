// The fp32 master as a bf16 param plus a 16-bit remainder (kopt/impl/param_remainder.hpp):
// joined back, every master is bitwise what was split (every high half, the boundary low
// halves, random ones); the param is the nearest bf16, found here in double arithmetic,
// with ties toward the truncation, and equals kopt's round-to-nearest-even everywhere but on
// exact ties with an odd high half.
#include <cmath>
#include <cstring>
#include <kopt/impl/param_remainder.hpp>
#include <limits>
#include <random>

#include "test_support.hpp"

namespace {
namespace test_param_remainder {

using kopt::bfloat16;
using kopt::Impl::join_master;
using kopt::Impl::split_master;
using kopt_test::bits_of;
using kopt_test::float_of;

// The bf16 a finite master rounds to, by value: of the two bf16 around it (its truncation t
// and the next one away from zero), the nearer; a tie goes to t. Past the largest finite
// bf16 the next one is Inf (the midpoint there rounds to the max, above it to Inf).
std::uint16_t nearest_by_value(float master) {
  const auto t = static_cast<std::uint16_t>(bits_of(master) >> 16);
  const auto up = static_cast<std::uint16_t>(t + 1);  // next bf16 away from zero
  const double below = bfloat16{t}.to_float();
  double above = bfloat16{up}.to_float();
  if (std::isinf(above)) above = std::copysign(0x1p128, below);  // max + one ulp
  const double v = master;  // exact: these differences need at most 25 bits
  return std::fabs(v - above) < std::fabs(v - below) ? up : t;
}

void check_one(std::uint32_t x) {
  const float master = float_of(x);
  const auto s = split_master(master);
  const std::uint32_t back = bits_of(join_master(s.param, s.remainder));
  const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
  if (nan) {
    // Quietened, payload and sign kept; the param a NaN too.
    ASSERT_EQ(back, x | 0x00400000u) << std::hex << x;
    ASSERT_EQ(s.param.bits, bfloat16::from_float(master).bits) << std::hex << x;
    return;
  }
  ASSERT_EQ(back, x) << "master 0x" << std::hex << x << " -> param 0x" << s.param.bits
                     << ", remainder 0x" << s.remainder;
  const std::uint32_t low = x & 0xffffu, high = x >> 16;
  const bool odd_tie = low == 0x8000u && (high & 1u) == 1u;
  const std::uint16_t rne = bfloat16::from_float(master).bits;
  if (odd_tie) {
    ASSERT_EQ(s.param.bits, rne - 1u) << std::hex << x;  // one ulp toward the truncation
  } else {
    ASSERT_EQ(s.param.bits, rne) << std::hex << x;
  }
  if ((x & 0x7f800000u) != 0x7f800000u && (x & 0x7f800000u) != 0) {  // normal finite
    ASSERT_EQ(s.param.bits, nearest_by_value(master)) << std::hex << x;
  }
}

TEST(ParamRemainder, EveryHighHalfRoundTripsAndRoundsToNearest) {
  std::mt19937 rng(20261124);
  const std::uint32_t boundary[] = {0x0000u, 0x0001u, 0x0002u, 0x7ffeu, 0x7fffu,
                                    0x8000u, 0x8001u, 0x8002u, 0xfffeu, 0xffffu};
  for (std::uint32_t high = 0; high <= 0xffffu; ++high) {
    for (const std::uint32_t low : boundary) check_one(high << 16 | low);
    for (int k = 0; k < 22; ++k) check_one(high << 16 | (rng() & 0xffffu));
    if (HasFatalFailure()) return;
  }
}

TEST(ParamRemainder, RandomMastersRoundTrip) {
  std::mt19937 rng(7);
  for (int k = 0; k < (1 << 22); ++k) {
    check_one(static_cast<std::uint32_t>(rng()));
    if (HasFatalFailure()) return;
  }
}

TEST(ParamRemainder, TiesGoTowardTheTruncation) {
  // 1 + 2^-8 is halfway between the bf16s 1 and 1 + 2^-7: even high half, so nearest even.
  EXPECT_EQ(split_master(1.0f + 0x1p-8f).param.bits, bfloat16::from_float(1.0f).bits);
  // (1 + 2^-7) + 2^-8: odd high half; round-to-nearest-even would go up to 1 + 2^-6.
  const float odd_tie = 1.0f + 0x1p-7f + 0x1p-8f;
  EXPECT_EQ(split_master(odd_tie).param.bits, bfloat16::from_float(1.0f + 0x1p-7f).bits);
  EXPECT_EQ(join_master(split_master(odd_tie).param, split_master(odd_tie).remainder), odd_tie);
  // The largest finite float rounds to Inf as it would in round-to-nearest-even, and comes back.
  const float max = std::numeric_limits<float>::max();
  EXPECT_EQ(split_master(max).param.bits, 0x7f80u);
  EXPECT_EQ(join_master(split_master(max).param, split_master(max).remainder), max);
  EXPECT_EQ(split_master(-0.0f).param.bits, 0x8000u);
}

}  // namespace test_param_remainder
}  // namespace
