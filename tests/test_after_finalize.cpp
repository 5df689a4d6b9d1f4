// Calls after Kokkos is finalized (a process of its own: Kokkos cannot start again). Every
// entry point that would allocate or launch throws kopt::NotInitialized (C:
// KOPT_ERROR_NOT_INITIALIZED) naming the call, instead of crashing inside Kokkos.
#include <gtest/gtest.h>
#include <kopt/kopt.h>

#include <Kokkos_Core.hpp>
#include <kopt/kopt.hpp>

#include "test_support.hpp"

namespace {

// Kept alive past the end of the test: freeing Kokkos memory after finalize is itself an
// error (the documented rule is to destroy kopt objects first). Globals keep them reachable.
kopt::HybridOptimizer* cxx_optimizer = nullptr;
kopt_optimizer* c_optimizer = nullptr;
float memory[32];

TEST(AfterFinalize, EveryEntryPointThatNeedsKokkosSaysSo) {
  Kokkos::initialize();
  // The C interface's pair leaves a Kokkos the code runs itself running.
  ASSERT_EQ(kopt_initialize(), KOPT_OK);
  ASSERT_EQ(kopt_finalize(), KOPT_OK);
  ASSERT_TRUE(Kokkos::is_initialized());
  kopt::ParamGroup group;
  group.add("w", kopt::Tensor(memory, 8, kopt::DType::f32),
            kopt::Tensor(memory + 8, 8, kopt::DType::f32));
  cxx_optimizer = new kopt::HybridOptimizer({group});
  cxx_optimizer->step();

  kopt_groups* groups = nullptr;
  ASSERT_EQ(kopt_groups_create(&groups), KOPT_OK);
  kopt_adam_config c;
  kopt_adam_config_default(&c);
  ASSERT_EQ(kopt_groups_add_group(groups, &c, 0, nullptr), KOPT_OK);
  ASSERT_EQ(kopt_groups_add_param(groups, 0, "w", memory + 16, KOPT_F32, memory + 24, KOPT_F32, 8,
                                  KOPT_HOST),
            KOPT_OK);
  ASSERT_EQ(kopt_optimizer_create(groups, nullptr, &c_optimizer), KOPT_OK);
  ASSERT_EQ(kopt_step(c_optimizer, nullptr), KOPT_OK);

  Kokkos::finalize();  // as a code that runs Kokkos itself may, too early

  using kopt_test::expect_error;
  const std::string needle = "Kokkos is not initialized (or was already finalized)";
  expect_error<kopt::NotInitialized>([] { cxx_optimizer->step(); }, "step: " + needle);
  expect_error<kopt::NotInitialized>([] { cxx_optimizer->save("/tmp/kopt-never"); },
                                     "save: " + needle);
  expect_error<kopt::NotInitialized>([] { cxx_optimizer->load("/tmp/kopt-never"); },
                                     "load: " + needle);
  expect_error<kopt::NotInitialized>([] { cxx_optimizer->reload_model_params(); },
                                     "reload_model_params: " + needle);
  expect_error<kopt::NotInitialized>([&] { kopt::HybridOptimizer again({group}); },
                                     "kopt::HybridOptimizer: " + needle);
  EXPECT_EQ(cxx_optimizer->step_count("w"), 1);  // bookkeeping still answers

  EXPECT_EQ(kopt_step(c_optimizer, nullptr), KOPT_ERROR_NOT_INITIALIZED);
  EXPECT_NE(std::string(kopt_last_error()).find(needle), std::string::npos) << kopt_last_error();
  EXPECT_EQ(kopt_save(c_optimizer, "/tmp/kopt-never"), KOPT_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(kopt_reload_model_params(c_optimizer), KOPT_ERROR_NOT_INITIALIZED);
  kopt_optimizer* another = nullptr;
  EXPECT_EQ(kopt_optimizer_create(groups, nullptr, &another), KOPT_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(another, nullptr);
  std::int64_t count = 0;
  EXPECT_EQ(kopt_step_count(c_optimizer, "w", &count), KOPT_OK);
  EXPECT_EQ(count, 1);
  kopt_groups_destroy(groups);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
