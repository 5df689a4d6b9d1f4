// Serial and OpenMP give bitwise identical results for the same inputs. CTest runs this at
// OMP_NUM_THREADS = 1, 2 and 4 (KOPT_TEST_THREADS says which, and is checked).
#include <cstdlib>
#include <cstring>

#include "adam_case.hpp"

#if defined(KOKKOS_ENABLE_SERIAL) && defined(KOKKOS_ENABLE_OPENMP)

namespace {
namespace test_determinism {

using namespace kopt_test;

template <class Space, class P, class G>
std::pair<std::vector<P>, std::vector<double>> run(int steps) {
  std::vector<std::size_t> sizes = {1, 13, 8199, 40000, 0, 77};
  AdamCase<Space, P, G> c(every_variant(), sizes, /*seed=*/99);
  for (int s = 0; s < steps; ++s) c.step(0.75);
  Kokkos::fence();
  std::vector<P> params;
  std::vector<double> state;
  for (std::size_t j = 0; j < sizes.size(); ++j) {
    const auto& p = c.params[j]->download();
    params.insert(params.end(), p.begin(), p.end());
    const auto s = c.opt.state(c.name(j));
    // An array, not a braced list, in the range-for: nvcc's front end rejects the latter.
    const decltype(s.exp_avg) views[] = {s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, s.master};
    for (const auto& v : views) {
      const auto h = to_host(v);
      state.insert(state.end(), h.begin(), h.end());
    }
  }
  return {params, state};
}

template <class P, class G>
void expect_bitwise_equal() {
  const auto [p_serial, s_serial] = run<Kokkos::Serial, P, G>(25);
  const auto [p_omp, s_omp] = run<Kokkos::OpenMP, P, G>(25);
  ASSERT_EQ(p_serial.size(), p_omp.size());
  EXPECT_EQ(std::memcmp(p_serial.data(), p_omp.data(), p_serial.size() * sizeof(P)), 0);
  ASSERT_EQ(s_serial.size(), s_omp.size());
  EXPECT_EQ(std::memcmp(s_serial.data(), s_omp.data(), s_serial.size() * sizeof(double)), 0);
}

TEST(Determinism, SerialAndOpenMPAgreeBitwise) {
  if (const char* want = std::getenv("KOPT_TEST_THREADS")) {
    ASSERT_EQ(Kokkos::OpenMP().concurrency(), std::atoi(want)) << "OpenMP thread count";
  }
  expect_bitwise_equal<float, float>();
  expect_bitwise_equal<kopt::bfloat16, float>();
  expect_bitwise_equal<kopt::float16, kopt::bfloat16>();
  expect_bitwise_equal<float, kopt::float16>();
}

}  // namespace test_determinism
}  // namespace

#endif
