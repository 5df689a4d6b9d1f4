#pragma once
// The cases of the exact-sum window tests (test_grad_norm.cpp: ExponentWindow;
// test_tensor_sums.cpp: its lanes): values that sums of squares of floats can be (multiples
// of 2^-298), drawn around several exponents with several spreads, from the fixed point's
// least bit up to past the largest value it takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <kopt/impl/exact_sum.hpp>
#include <random>
#include <string>

namespace kopt_test {

/// Calls f(draw, label) for each (spread, centre) case; draw() gives the case's next value.
template <class F>
void for_each_exact_sum_case(unsigned seed, F&& f) {
  using kopt::Impl::ExactSum;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  const int top = ExactSum::overflow_biased - 1023;  // 2^top: add() counts it as +Inf
  for (const int spread : {0, 8, 40, 90, 600}) {
    for (const int centre : {-297, -250, 0, 200, top - 70, top - 2}) {
      std::uniform_int_distribution<int> expo(std::max(-298, centre - spread),
                                              std::min(top + 1, centre + spread));
      const auto draw = [&] {
        const int e = expo(rng);
        double x = std::ldexp(std::floor(std::ldexp(mant(rng), 52)), e - 52);
        if (e - 52 < -298) x = std::ldexp(std::floor(std::ldexp(x, 298)), -298);
        return x;
      };
      f(draw, "spread " + std::to_string(spread) + " centre " + std::to_string(centre));
    }
  }
}

/// Flushes `window` into `windowed` and expects the digits and specials of `single`
/// (ExactSum::add of each value the window took).
template <class Window>
void expect_digits_of_single_adds(kopt::Impl::ExactSum single, Window& window,
                                  kopt::Impl::ExactSum windowed, const std::string& label) {
  window.flush(windowed);
  single.normalize();
  windowed.normalize();
  SCOPED_TRACE(label);
  EXPECT_EQ(std::memcmp(single.digit, windowed.digit, sizeof single.digit), 0);
  EXPECT_EQ(single.special, windowed.special);
}

}  // namespace kopt_test
