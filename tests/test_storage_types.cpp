// kopt::bfloat16 and kopt::float16 against an independent reference: the nearest
// representable value found by search over all 65,536 encodings, ties to even.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <kopt/impl/f16_blocks.hpp>
#include <limits>
#include <type_traits>

#include "test_support.hpp"

namespace {
namespace test_storage_types {

using kopt::bfloat16;
using kopt::float16;
using kopt_test::bits_of;
using kopt_test::float_of;

template <class H>
float widen_bits(std::uint16_t bits) {
  return H{bits}.to_float();
}

// Every non-negative finite encoding of H with its value, ascending, plus +Inf placed where
// the next binade's first value would be (max + one ulp): rounding past max's midpoint must
// give Inf, which is how IEEE defines overflow under round-to-nearest-even.
template <class H>
struct Encodings {
  std::vector<std::pair<double, std::uint16_t>> table;
  Encodings() {
    const std::uint16_t inf = std::is_same_v<H, bfloat16> ? 0x7f80 : 0x7c00;
    for (std::uint32_t b = 0; b < inf; ++b) {
      const std::uint16_t bits = static_cast<std::uint16_t>(b);
      table.emplace_back(static_cast<double>(widen_bits<H>(bits)), bits);
    }
    const double max = table.back().first;
    const double ulp = max - table[table.size() - 2].first;
    table.emplace_back(max + ulp, inf);
  }
  // The reference rounding of `x` (not NaN), written without kopt's bit tricks.
  std::uint16_t round(float x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= table.back().first) return sign | table.back().second;
    auto hi = std::upper_bound(table.begin(), table.end(), a,
                               [](double v, const auto& e) { return v < e.first; });
    auto lo = hi - 1;  // lo->first <= a < hi->first
    const double dlo = a - lo->first, dhi = hi->first - a;
    std::uint16_t pick;
    if (dlo < dhi)
      pick = lo->second;
    else if (dhi < dlo)
      pick = hi->second;
    else
      pick = (lo->second & 1) == 0 ? lo->second : hi->second;  // tie: even mantissa
    return sign | pick;
  }
};

template <class H>
bool is_nan_bits(std::uint16_t b) {
  return std::isnan(widen_bits<H>(b));
}

template <class H>
class StorageTypeTest : public ::testing::Test {};
using Types16 = ::testing::Types<bfloat16, float16>;
TYPED_TEST_SUITE(StorageTypeTest, Types16);

TYPED_TEST(StorageTypeTest, AllBitPatternsRoundTripThroughFloat) {
  using H = TypeParam;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = widen_bits<H>(bits);
    const std::uint16_t back = H::from_float(f).bits;
    if (is_nan_bits<H>(bits)) {
      EXPECT_TRUE(is_nan_bits<H>(back)) << std::hex << b;
      EXPECT_EQ(back & 0x8000, bits & 0x8000) << "NaN keeps its sign " << std::hex << b;
    } else {
      ASSERT_EQ(back, bits) << "pattern 0x" << std::hex << b << " -> " << f;
    }
  }
}

TYPED_TEST(StorageTypeTest, MatchesReferenceOnRandomFloats) {
  using H = TypeParam;
  const Encodings<H> enc;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::uniform_real_distribution<float> unit(-4.0f, 4.0f);
  std::size_t checked = 0;
  for (int i = 0; i < 3'000'000; ++i) {
    // Half uniform over all bit patterns (every exponent, subnormals, NaN, Inf), half
    // uniform in [-4, 4) where training values live.
    const float x = (i & 1) ? float_of(any_bits(rng)) : unit(rng);
    const std::uint16_t got = H::from_float(x).bits;
    if (std::isnan(x)) {
      ASSERT_TRUE(is_nan_bits<H>(got)) << x;
      continue;
    }
    ASSERT_EQ(got, enc.round(x)) << "x = " << x << " (0x" << std::hex << bits_of(x) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 2'900'000u);
}

TYPED_TEST(StorageTypeTest, TiesOverflowSubnormalsAndSpecials) {
  using H = TypeParam;
  const Encodings<H> enc;
  std::vector<float> cases = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::min()};
  // Every midpoint between neighbouring encodings is a tie, and one float ulp either side.
  for (std::size_t k = 0; k + 1 < enc.table.size(); k += 97) {
    const float mid = static_cast<float>((enc.table[k].first + enc.table[k + 1].first) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f)}) {
      cases.push_back(x);
      cases.push_back(-x);
    }
  }
  for (float x : cases) EXPECT_EQ(H::from_float(x).bits, enc.round(x)) << x;
  EXPECT_TRUE(is_nan_bits<H>(H::from_float(std::nanf("")).bits));
  EXPECT_TRUE(is_nan_bits<H>(H::from_float(-std::nanf("")).bits));
  EXPECT_EQ(H::from_float(-std::nanf("")).bits & 0x8000, 0x8000);
}

// The host loops convert 16 at a time (kopt/impl/f16_blocks.hpp; x86 F16C instructions for
// float16 where the compiler targets them): the same bits as the scalar conversions for every
// encoding and every float tried, NaN payloads included; widening may only quieten a NaN.
TYPED_TEST(StorageTypeTest, BlockConversionsMatchScalarBitwise) {
  using H = TypeParam;
  using kopt::Impl::f16_block;
  std::vector<H> all(65536);
  for (std::uint32_t b = 0; b < all.size(); ++b) all[b] = H{static_cast<std::uint16_t>(b)};
  std::vector<float> widened(all.size());
  for (std::size_t i = 0; i < all.size(); i += f16_block)
    kopt::Impl::widen_block(all.data() + i, widened.data() + i);
  for (std::uint32_t b = 0; b < all.size(); ++b) {
    const std::uint32_t want = bits_of(all[b].to_float()), got = bits_of(widened[b]);
    if (std::isnan(all[b].to_float()))
      ASSERT_EQ(got | 0x400000u, want | 0x400000u) << std::hex << b;
    else
      ASSERT_EQ(got, want) << std::hex << b;
  }
  const Encodings<H> enc;
  std::vector<float> inputs;
  for (std::size_t k = 0; k + 1 < enc.table.size(); ++k) {  // every tie, one ulp either side
    const float mid = static_cast<float>((enc.table[k].first + enc.table[k + 1].first) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f)})
      inputs.insert(inputs.end(), {x, -x});
  }
  std::mt19937 rng(99);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  while (inputs.size() % f16_block != 0 || inputs.size() < 1'000'000)
    inputs.push_back(float_of(any_bits(rng)));  // every exponent, subnormals, NaN payloads
  std::vector<H> rounded(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); i += f16_block)
    kopt::Impl::round_block(inputs.data() + i, rounded.data() + i);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    ASSERT_EQ(rounded[i].bits, H::from_float(inputs[i]).bits)
        << inputs[i] << " (0x" << std::hex << bits_of(inputs[i]) << ")";
}

TEST(Float16, KnownValues) {
  EXPECT_EQ(float16::from_float(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16::from_float(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float16::from_float(65519.996f).bits, 0x7bff);  // below the midpoint
  EXPECT_EQ(float16::from_float(65520.0f).bits, 0x7c00);    // the midpoint: ties to Inf (even)
  EXPECT_EQ(float16::from_float(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float16::from_float(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie -> even (0)
  EXPECT_EQ(float16::from_float(std::ldexp(3.0f, -25)).bits, 0x0002);  // tie -> even (2)
  EXPECT_EQ(float16::from_float(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  EXPECT_EQ(float16{0x0001}.to_float(), std::ldexp(1.0f, -24));
}

TEST(BFloat16, KnownValues) {
  EXPECT_EQ(bfloat16::from_float(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16::from_float(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);        // tie -> even
  EXPECT_EQ(bfloat16::from_float(1.0f + std::ldexp(3.0f, -8)).bits, 0x3f82);        // tie -> even
  EXPECT_EQ(bfloat16::from_float(std::numeric_limits<float>::max()).bits, 0x7f80);  // Inf
  EXPECT_EQ(bfloat16{0x0001}.to_float(), std::ldexp(1.0f, -133));  // subnormals kept
}

// A float converts by from_float alone: H(x) and H{x} of a float or double do not compile
// (as an aggregate, H(0.7f) compiled and held the encoding 0), nor does an implicit
// conversion from a number; H{bits} and H(bits) hold an encoding, and H{} is +0.
template <class H>
void expect_floats_convert_by_from_float_alone() {
  static_assert(!std::is_constructible_v<H, float> && !std::is_constructible_v<H, double>);
  static_assert(!std::is_convertible_v<float, H> && !std::is_convertible_v<std::uint16_t, H>);
  static_assert(std::is_constructible_v<H, std::uint16_t> && std::is_trivial_v<H>);
  EXPECT_EQ(H{0x3c00}.bits, 0x3c00);
  EXPECT_EQ(H(std::uint16_t{0x8001}).bits, 0x8001);
  EXPECT_EQ(H{}.bits, 0);
  constexpr H one{0x3f80};  // usable in constant expressions, as the aggregate was
  static_assert(one.bits == 0x3f80);
}

TEST(StorageTypes, FloatsConvertByFromFloatAlone) {
  expect_floats_convert_by_from_float_alone<bfloat16>();
  expect_floats_convert_by_from_float_alone<float16>();
}

// The same conversions inside a kernel on every enabled space give the host's bits.
template <class Space>
class StorageTypeOnSpace : public ::testing::Test {};
TYPED_TEST_SUITE(StorageTypeOnSpace, kopt_test::EnabledSpaces, kopt_test::SpaceName);

template <class H, class Space>
void check_kernel_matches_host(const std::vector<float>& inputs) {
  kopt_test::SpaceArray<float, Space> in(inputs.size());
  kopt_test::SpaceArray<std::uint16_t, Space> rounded(inputs.size());
  kopt_test::SpaceArray<float, Space> widened(65536);
  in.host = inputs;
  in.upload();
  auto in_v = in.view;
  auto out_v = rounded.view;
  auto wide_v = widened.view;
  Kokkos::parallel_for(
      "kopt_test::round", Kokkos::RangePolicy<Space>(0, inputs.size()),
      KOKKOS_LAMBDA(const std::size_t i) { out_v(i) = H::from_float(in_v(i)).bits; });
  Kokkos::parallel_for(
      "kopt_test::widen", Kokkos::RangePolicy<Space>(0, 65536),
      KOKKOS_LAMBDA(const int b) { wide_v(b) = H{static_cast<std::uint16_t>(b)}.to_float(); });
  const auto& got = rounded.download();
  const auto& wide = widened.download();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    ASSERT_EQ(got[i], H::from_float(inputs[i]).bits) << inputs[i];
  for (std::uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(bits_of(wide[b]), bits_of(H{static_cast<std::uint16_t>(b)}.to_float())) << b;
}

// Every value of H, its float neighbours, the ties halfway to the next value and theirs:
// each rounding boundary (subnormals, the overflow to Inf, signs) where a device's own
// conversion instruction (float16 on CUDA) could part from the host's.
template <class H>
std::vector<float> boundaries_of() {
  std::vector<float> out;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float v = H{static_cast<std::uint16_t>(b)}.to_float();
    const float next = H{static_cast<std::uint16_t>(b + 1)}.to_float();
    if (std::isnan(v)) continue;
    out.insert(out.end(), {v, std::nextafter(v, -INFINITY), std::nextafter(v, INFINITY)});
    if (std::isfinite(next) && (b & 0x7fffu) != 0x7fffu) {
      const auto tie = static_cast<float>((static_cast<double>(v) + next) / 2);  // exact
      out.insert(out.end(), {tie, std::nextafter(tie, -INFINITY), std::nextafter(tie, INFINITY)});
    }
  }
  return out;
}

TYPED_TEST(StorageTypeOnSpace, KernelConversionsMatchHostBitwise) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  std::vector<float> inputs(1 << 20);
  for (auto& x : inputs) x = float_of(any_bits(rng));
  for (const float x : {65504.0f, 65519.996f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f})
    inputs.insert(inputs.end(), {x, -x});
  check_kernel_matches_host<bfloat16, TypeParam>(inputs);
  check_kernel_matches_host<float16, TypeParam>(inputs);
  check_kernel_matches_host<bfloat16, TypeParam>(boundaries_of<bfloat16>());
  check_kernel_matches_host<float16, TypeParam>(boundaries_of<float16>());
}

}  // namespace test_storage_types
}  // namespace
