// The lane sums of the tensor stages (kopt/impl/lane_sums.hpp, factored_moments.hpp): a 16-bit
// grad widened a strip at a time gives the same bits as summed straight from it, for rows
// of every length around the lanes and strips; and the lanes are a faithful sum.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <kopt/impl/factored_moments.hpp>
#include <random>
#include <vector>

namespace {
namespace test_lane_sums {

using kopt::bfloat16;
using kopt::float16;

constexpr std::int64_t kLengths[] = {0, 1, 15, 16, 17, 255, 256, 257, 512, 1000, 4099};

template <class T>
std::vector<T> random_row(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 8);
  std::vector<T> x(static_cast<std::size_t>(n));
  for (T& v : x) v = T::from_float(std::ldexp(normal(gen), exponent(gen)));
  return x;
}

std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

template <class T>
void check_row_groups() {
  for (const std::int64_t cols : kLengths) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    std::vector<std::vector<T>> rows;
    for (int q = 0; q < 4; ++q) rows.push_back(random_row<T>(cols, 11 + q));
    const T* const four[4] = {rows[0].data(), rows[1].data(), rows[2].data(), rows[3].data()};
    const T* const one[1] = {rows[0].data()};
    std::vector<double> part_strips(cols, 0.5), part_plain(cols, 0.5);
    double s4[4], p4[4], s1[1], p1[1];
    kopt::Impl::detail::row_group_sums<4, true>(four, cols, 0.75f, part_strips.data(), s4);
    kopt::Impl::detail::row_group_sums<4, false>(four, cols, 0.75f, part_plain.data(), p4);
    kopt::Impl::detail::row_group_sums<1, true>(one, cols, 0.75f, part_strips.data(), s1);
    kopt::Impl::detail::row_group_sums<1, false>(one, cols, 0.75f, part_plain.data(), p1);
    for (int q = 0; q < 4; ++q) EXPECT_EQ(bits(s4[q]), bits(p4[q])) << "row " << q;
    EXPECT_EQ(bits(s1[0]), bits(p1[0]));
    for (std::int64_t j = 0; j < cols; ++j)
      ASSERT_EQ(bits(part_strips[j]), bits(part_plain[j])) << "column " << j;
    long double want = 0.0L;  // row 0 alone, straight
    for (const T& v : rows[0]) want += std::pow(static_cast<long double>(v.to_float() * 0.75f), 2);
    EXPECT_NEAR(s1[0], static_cast<double>(want), 1e-14 * static_cast<double>(want));
  }
}

TEST(LaneSums, RowGroupsOfWidenedStripsAreTheSameBits) {
  check_row_groups<bfloat16>();
  check_row_groups<float16>();
}

template <class T>
void check_norm() {
  for (const std::int64_t cols : kLengths) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const std::int64_t rows = 3;
    const std::vector<T> g = random_row<T>(rows * cols, 5);
    std::vector<float> row_factor = {0.5f, 2.0f, 1.0f}, col_factor(cols);
    for (std::int64_t j = 0; j < cols; ++j)
      col_factor[j] = 0.25f + 0.01f * static_cast<float>(j % 97);
    double strips[rows], plain[rows];
    const float cap = 3.0f;  // some products past it
    const kopt::Impl::detail::FactoredNorm<T, true> a{
        g.data(), 1.5f, row_factor.data(), col_factor.data(), strips, cols, cap};
    const kopt::Impl::detail::FactoredNorm<T, false> b{
        g.data(), 1.5f, row_factor.data(), col_factor.data(), plain, cols, cap};
    for (std::int64_t i = 0; i < rows; ++i) {
      a(i);
      b(i);
      EXPECT_EQ(bits(strips[i]), bits(plain[i])) << "row " << i;
    }
  }
}

TEST(LaneSums, NormOfWidenedStripsIsTheSameBits) {
  check_norm<bfloat16>();
  check_norm<float16>();
}

}  // namespace test_lane_sums
}  // namespace
