// kopt called from a thread other than the one that initialized Kokkos. Kokkos 3's OpenMP
// backend cannot allocate from there and would run kernels on one thread: kopt refuses the
// call up front (kopt::NotInitialized) and changes nothing. Other builds just work.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <kopt/kopt.hpp>
#include <string>
#include <thread>

namespace {
namespace test_threads {

#if defined(KOKKOS_ENABLE_OPENMP) && KOKKOS_VERSION < 40000
constexpr bool kRefused = true;
#else
constexpr bool kRefused = false;
#endif

TEST(Threads, AStepFromAnotherThreadIsRefusedOrWorks) {
  Kokkos::View<float*, Kokkos::HostSpace> param("param", 100), grad("grad", 100);
  Kokkos::deep_copy(param, 1.0f);
  Kokkos::deep_copy(grad, 0.5f);
  kopt::ParamGroup group;
  group.add("w", kopt::Tensor(param), kopt::Tensor(grad));
  kopt::HybridOptimizer opt(std::vector<kopt::ParamGroup>{group});  // its first step allocates
  std::string error;
  bool not_initialized = false;
  std::thread other([&] {
    try {
      opt.step();
    } catch (const kopt::NotInitialized& e) {
      not_initialized = true;
      error = e.what();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  other.join();
  Kokkos::fence();
  if (kRefused) {
    EXPECT_TRUE(not_initialized) << error;
    EXPECT_NE(error.find("a thread other than the one that initialized Kokkos"), std::string::npos)
        << error;
    EXPECT_EQ(opt.step_count("w"), 0);
    EXPECT_EQ(param(0), 1.0f);  // nothing changed
  } else {
    EXPECT_TRUE(error.empty()) << error;
    EXPECT_EQ(opt.step_count("w"), 1);
  }
  opt.step();  // from this thread it works either way
  Kokkos::fence();
  EXPECT_EQ(opt.step_count("w"), kRefused ? 1 : 2);
  EXPECT_LT(param(0), 1.0f);
}

}  // namespace test_threads
}  // namespace
