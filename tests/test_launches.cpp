// One launch per step for many tensors, and every kernel and allocation labelled "kopt::",
// observed through Kokkos' tool callbacks.
#include <impl/Kokkos_Profiling.hpp>

#include "adam_case.hpp"

namespace {
namespace test_launches {

using namespace kopt_test;

std::vector<std::string> g_kernels;
std::vector<std::string> g_allocations;

void on_begin_for(const char* name, std::uint32_t, std::uint64_t* id) {
  g_kernels.emplace_back(name);
  *id = 0;
}
void on_allocate(Kokkos::Profiling::SpaceHandle, const char* label, const void*, std::uint64_t) {
  g_allocations.emplace_back(label);
}

// Records kernel and allocation labels while alive.
struct Recorder {
  Recorder() {
    g_kernels.clear();
    g_allocations.clear();
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(on_begin_for);
    Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  }
  ~Recorder() {
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
    Kokkos::Tools::Experimental::set_allocate_data_callback(nullptr);
  }
};

bool starts_with_kopt(const std::string& s) { return s.rfind("kopt::", 0) == 0; }

template <class Space>
class LaunchTest : public ::testing::Test {};
TYPED_TEST_SUITE(LaunchTest, EnabledSpaces, SpaceName);

TYPED_TEST(LaunchTest, AThousandTensorsStepInOneLabelledLaunch) {
  std::vector<std::size_t> sizes(1000);
  for (std::size_t j = 0; j < sizes.size(); ++j) sizes[j] = 1 + (j * 37) % 500;
  AdamCase<TypeParam, kopt::bfloat16, float> c({kopt::AdamConfig{}}, sizes);
  std::vector<std::string> allocations;
  {
    Recorder rec;
    c.step();  // first step: allocates the state and fills the masters
    allocations = g_allocations;
  }
  for (const auto& label : allocations) EXPECT_TRUE(starts_with_kopt(label)) << label;
  EXPECT_FALSE(allocations.empty());
  for (int s = 0; s < 3; ++s) {
    Recorder rec;
    c.step();
    // The test's own grad uploads are copies, not kernels: what launched is kopt's.
    ASSERT_EQ(g_kernels.size(), 1u) << "a step over 1000 tensors must be one launch";
    EXPECT_EQ(g_kernels[0], "kopt::test_adam::update");
    EXPECT_TRUE(g_allocations.empty()) << "a steady-state step allocates nothing";
  }
}

TYPED_TEST(LaunchTest, MixedDtypesAndAmsgradLaunchOncePerKernelClass) {
  // Two groups (amsgrad or not) -> two classes; a third param of another dtype is a third.
  kopt::FusedAdam<TypeParam> opt(TypeParam(), kopt::AdamConfig{}, "kopt::mixed");
  opt.add_group(kopt::AdamConfig{.amsgrad = true});
  SpaceArray<float, TypeParam> p(100), g(100), p2(100), g2(100);
  SpaceArray<kopt::float16, TypeParam> p3(100);
  opt.add("a", p.tensor(), g.tensor(), 0);
  opt.add("b", p2.tensor(), g2.tensor(), 1);
  opt.add("c", p3.tensor(), g2.tensor(), 0);
  opt.step();
  Recorder rec;
  opt.step();
  EXPECT_EQ(g_kernels.size(), 3u);
}

}  // namespace test_launches
}  // namespace
