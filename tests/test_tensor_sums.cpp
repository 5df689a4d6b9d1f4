// The block sums of the tensor-sums measure pass (kopt/impl/measure_strip.hpp): the vector
// form the host compiles and the scalar form devices run give the same bits, and the tree
// is a faithful sum of the squares.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <kopt/impl/measure_strip.hpp>
#include <limits>
#include <random>
#include <vector>

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

}  // namespace test_tensor_sums
}  // namespace
