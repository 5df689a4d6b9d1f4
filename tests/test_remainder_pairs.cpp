// The remainder masters a vector of pair words at a time (kopt/impl/remainder_pairs.hpp):
// join_master_pairs and split_master_pairs give join_master_bits and split_param_bits of
// each element, bit for bit: every 16-bit param beside remainders on both sides of the
// correction's boundary (0x8000, 0x8001) and at the ends, in both halves of a word; masters
// at every special value (zeros, subnormals, the largest finite, infinities, NaNs quiet and
// signalling, both signs) and at random; the forms for values none of which is NaN likewise.
// Run by this build's lanes: AVX-512 on a machine that has it, AVX2's 16-bit compares and
// blends on one without (the CI machine's kind), the generic lane code elsewhere.
#include <cstdint>
#include <kopt/impl/remainder_pairs.hpp>
#include <random>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace {
namespace test_remainder_pairs {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
using kopt::Impl::join_master_bits;
using kopt::Impl::lane_count;
using kopt::Impl::LaneF;
using kopt::Impl::LaneU;
using kopt::Impl::split_param_bits;
using kopt_test::bits_of;

// Joins the words of params p and remainders r (each element's: even index, low half)
// and checks each lane against the scalar join.
void check_join(const std::vector<std::uint16_t>& p, const std::vector<std::uint16_t>& r) {
  ASSERT_EQ(p.size(), r.size());
  for (std::size_t at = 0; at + 2 * lane_count <= p.size(); at += 2 * lane_count) {
    LaneU pw, rw;
    for (int l = 0; l < lane_count; ++l) {
      pw[l] = p[at + 2 * l] | std::uint32_t{p[at + 2 * l + 1]} << 16;
      rw[l] = r[at + 2 * l] | std::uint32_t{r[at + 2 * l + 1]} << 16;
    }
    LaneF w[2];
    kopt::Impl::join_master_pairs(pw, rw, w);
    for (int l = 0; l < lane_count; ++l)
      for (int h = 0; h < 2; ++h) {
        const std::size_t e = at + 2 * l + h;
        ASSERT_EQ(bits_of(w[h][l]), join_master_bits(std::uint32_t{p[e]}, std::uint32_t{r[e]}))
            << std::hex << "param 0x" << p[e] << ", remainder 0x" << r[e];
      }
  }
}

TEST(RemainderPairs, JoinGivesJoinMasterBitsOfEveryParam) {
  const std::uint16_t remainders[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001,
                                      0x8002, 0xfffe, 0xffff, 0x1234, 0xc3a5};
  std::vector<std::uint16_t> p, r;
  for (std::uint32_t param = 0; param < 0x10000u; ++param)
    for (const std::uint16_t rem : remainders) {
      p.push_back(static_cast<std::uint16_t>(param));
      r.push_back(rem);
    }
  check_join(p, r);
  // The same pairs again, shifted by one element: each param in the other half of a word.
  p.insert(p.begin(), 0x3f80);
  r.insert(r.begin(), 0x8001);
  p.resize(p.size() / (2 * lane_count) * (2 * lane_count));
  r.resize(p.size());
  check_join(p, r);
}

TEST(RemainderPairs, JoinGivesJoinMasterBitsOfRandomWords) {
  std::mt19937 rng(0x5eed);
  std::vector<std::uint16_t> p(1 << 18), r(1 << 18);
  for (std::size_t i = 0; i < p.size(); ++i) {
    p[i] = static_cast<std::uint16_t>(rng());
    r[i] = static_cast<std::uint16_t>(rng());
  }
  check_join(p, r);
}

// Masters (float bits) at every special value, every exponent with mantissa ends that carry,
// every low half of one high half, and at random; a whole number of lane vectors of pairs.
std::vector<std::uint32_t> test_masters() {
  std::vector<std::uint32_t> x = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u,
                                  0x00008001u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu,
                                  0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                  0xffc00001u, 0x7f800001u, 0xff80ffffu, 0x7fbfffffu, 0x7fffffffu};
  std::mt19937 rng(0xabc);
  while (x.size() < (1u << 18)) x.push_back(static_cast<std::uint32_t>(rng()));
  // Every exponent with mantissa ends that carry, and every low half of one high half.
  for (std::uint32_t e = 0; e < 256; ++e)
    for (const std::uint32_t m : {0x7f7fffu, 0x7f8000u, 0x000000u, 0x7fffffu})
      for (const std::uint32_t sign : {0u, 0x80000000u}) x.push_back(sign | e << 23 | m);
  for (std::uint32_t low = 0; low < 0x10000u; ++low) x.push_back(0x3f810000u | low);
  x.resize(x.size() / (2 * lane_count) * (2 * lane_count));
  return x;
}

// `x` without its NaNs, still a whole number of lane vectors of pairs.
std::vector<std::uint32_t> without_nan(std::vector<std::uint32_t> x) {
  std::erase_if(x, [](std::uint32_t v) { return (v & 0x7fffffffu) > 0x7f800000u; });
  x.resize(x.size() / (2 * lane_count) * (2 * lane_count));
  return x;
}

// Splits `x` a vector of pairs at a time (Finite: split_finite_master_pairs, given only the
// masters that are not NaN) and checks each half against the scalar split.
template <bool Finite>
void check_split(std::vector<std::uint32_t> x) {
  if (Finite) x = without_nan(std::move(x));
  for (std::size_t at = 0; at < x.size(); at += 2 * lane_count) {
    LaneF w[2];
    for (int l = 0; l < lane_count; ++l)
      for (int h = 0; h < 2; ++h) w[h][l] = kopt_test::float_of(x[at + 2 * l + h]);
    LaneU pw, rw;
    Finite ? kopt::Impl::split_finite_master_pairs(w, pw, rw)
           : kopt::Impl::split_master_pairs(w, pw, rw);
    for (int l = 0; l < lane_count; ++l)
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t v = x[at + 2 * l + h];
        ASSERT_EQ(pw[l] >> 16 * h & 0xffffu, split_param_bits(v)) << std::hex << "master 0x" << v;
        ASSERT_EQ(rw[l] >> 16 * h & 0xffffu, v & 0xffffu) << std::hex << "master 0x" << v;
      }
  }
}

TEST(RemainderPairs, SplitGivesSplitParamBitsAndLowHalves) { check_split<false>(test_masters()); }

TEST(RemainderPairs, FiniteSplitGivesSplitParamBitsOfEveryMasterButNaN) {
  check_split<true>(test_masters());
}

// bf16_finite_pairs (the paired loop's bf16 stores where no value is NaN) rounds each float
// as bfloat16::from_float does, the even element into each word's low half.
TEST(RemainderPairs, FiniteBf16PairsRoundEveryFloatButNaNToNearestEven) {
  const std::vector<std::uint32_t> x = without_nan(test_masters());
  for (std::size_t at = 0; at < x.size(); at += 2 * lane_count) {
    LaneF f[2];
    for (int l = 0; l < lane_count; ++l)
      for (int h = 0; h < 2; ++h) f[h][l] = kopt_test::float_of(x[at + 2 * l + h]);
    const LaneU words = kopt::Impl::bf16_finite_pairs(f[0], f[1]);
    for (int l = 0; l < lane_count; ++l)
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t v = x[at + 2 * l + h];
        ASSERT_EQ(words[l] >> 16 * h & 0xffffu, kopt::Impl::bf16_nearest_bits(v))
            << std::hex << "float 0x" << v;
      }
  }
}
#else
TEST(RemainderPairs, NeedsVectorExtensions) {
  GTEST_SKIP() << "join_master_pairs and split_master_pairs are lane code";
}
#endif

}  // namespace test_remainder_pairs
}  // namespace
