// The block sums of the tensor-sums measure pass (kopt/impl/measure_strip.hpp): the vector
// form the host compiles and the scalar form devices run give the same bits, and the tree
// is a faithful sum of the squares; the host's strip of 8 blocks at once
// (kopt/impl/strip_sums.hpp) gives each block's bits, and its lane window ExactSum's digits.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <kopt/impl/measure_strip.hpp>
#include <kopt/impl/strip_sums.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exact_sum_cases.hpp"

namespace {
namespace test_tensor_sums {

#ifdef KOPT_HAVE_VECTOR_EXTENSIONS
// Blocks of random floats over many magnitudes, signs, zeros, subnormals and infinities.
std::vector<float> random_blocks(int blocks, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 120), kind(0, 40);
  std::vector<float> x(static_cast<std::size_t>(blocks) * kopt::Impl::tensor_sum_block);
  for (float& v : x) {
    const int k = kind(gen);
    v = k == 0 ? 0.0f : k == 1 ? -0.0f : std::ldexp(mantissa(gen), exponent(gen));
  }
  x[5] = std::numeric_limits<float>::infinity();
  x[40] = std::numeric_limits<float>::denorm_min();
  return x;
}
#endif

TEST(TensorSums, VectorTreeIsTheScalarTreeBitwise) {
#ifndef KOPT_HAVE_VECTOR_EXTENSIONS
  GTEST_SKIP() << "this compiler has no vector form: the scalar tree runs everywhere";
#else
  const std::vector<float> x = random_blocks(20000, 7);
  for (std::size_t b = 0; b < x.size(); b += kopt::Impl::tensor_sum_block) {
    const double v = kopt::Impl::block_square_sum_vector(x.data() + b);
    const double s = kopt::Impl::block_square_sum_scalar(x.data() + b);
    ASSERT_EQ(std::bit_cast<std::uint64_t>(v), std::bit_cast<std::uint64_t>(s)) << "block " << b;
  }
#endif
}

TEST(TensorSums, TreeIsTheSumOfSquares) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 1000; ++trial) {
    float x[kopt::Impl::tensor_sum_block] = {};
    const int n = 1 + trial % kopt::Impl::tensor_sum_block;  // zero padding past n
    long double exact = 0.0L;
    for (int e = 0; e < n; ++e) {
      x[e] = normal(gen) * std::ldexp(1.0f, trial % 60 - 30);
      exact += static_cast<long double>(x[e]) * x[e];
    }
    const double got = kopt::Impl::block_square_sum(x);
    // 15 adds of non-negative terms: within 15 ulps of double.
    EXPECT_NEAR(got, static_cast<double>(exact), 15 * 1.2e-16 * static_cast<double>(exact))
        << "trial " << trial;
  }
  const float ones[kopt::Impl::tensor_sum_block] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(kopt::Impl::block_square_sum(ones), 16.0);
}

// The strip's 8 block sums at once, against the scalar tree of each block (devices run that).
TEST(TensorSums, StripOfEightBlocksIsEachBlocksTreeBitwise) {
#ifndef KOPT_HAVE_VECTOR_EXTENSIONS
  GTEST_SKIP() << "this compiler has no vector form: the strip is block_square_sum's loop";
#else
  const std::vector<float> x = random_blocks(8 * 5000, 11);
  for (std::size_t at = 0; at < x.size(); at += kopt::Impl::measure_strip_size) {
    double sums[kopt::Impl::blocks_per_strip];
    kopt::Impl::strip_square_sums(x.data() + at, sums);
    for (int b = 0; b < kopt::Impl::blocks_per_strip; ++b) {
      const double s =
          kopt::Impl::block_square_sum_scalar(x.data() + at + b * kopt::Impl::tensor_sum_block);
      ASSERT_EQ(std::bit_cast<std::uint64_t>(sums[b]), std::bit_cast<std::uint64_t>(s))
          << "strip at " << at << ", block " << b;
    }
  }
#endif
}

// The lane window (8 values at a time) gives ExactSum::add's digits: values in and out of
// its window, zeros, past its capacity, at both ends of the fixed point, and specials.
TEST(TensorSums, LaneWindowGivesTheDigitsOfSingleAdds) {
  using kopt::Impl::ExactSum;
  using kopt::Impl::ExponentWindowLanes;
  kopt_test::for_each_exact_sum_case(5, [](const auto& draw, const std::string& label) {
    ExactSum single, windowed;
    ExponentWindowLanes window;
    for (int i = 0; i < 3 * kopt::Impl::ExponentWindow::capacity + 17; ++i) {
      double x[8];
      for (int l = 0; l < 8; ++l) {  // some zeros; the first vectors' first lanes all zeros
        x[l] = (i * 8 + l) % 37 == 5 || (i < 3 && l < 5) ? 0.0 : draw();
        single.add(x[l]);
      }
      window.add(x, windowed);
    }
    kopt_test::expect_digits_of_single_adds(single, window, windowed, label);
  });
  for (const double special : {HUGE_VAL, std::nan(""), -std::nan("")}) {
    ExactSum windowed;
    ExponentWindowLanes window;
    const double first[8] = {0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    const double second[8] = {3.0, 0.0, special, 4.0, 0.0, 0.0, 0.0, 5.0};
    window.add(first, windowed);
    window.add(second, windowed);
    window.flush(windowed);
    EXPECT_EQ(windowed.special, std::isnan(special) ? ExactSum::saw_nan : ExactSum::saw_inf);
    windowed.special = 0;
    windowed.normalize();
    ExactSum single;
    for (const double v : {1.0, 2.0, 3.0, 4.0, 5.0}) single.add(v);
    single.normalize();
    EXPECT_EQ(std::memcmp(single.digit, windowed.digit, sizeof single.digit), 0);
  }
}

}  // namespace test_tensor_sums
}  // namespace
