// Test entry point: Kokkos lives for the whole run (it cannot be re-initialized).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <cstring>

namespace kopt_test {
int save_loop(const char* dir);  // test_checkpoint_kill.cpp's child: saves until killed
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--kopt-save-loop") == 0)
    return kopt_test::save_loop(argv[2]);
  // CTest lists the tests by running this binary; Kokkos must not print into that list.
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--gtest_list_tests") == 0) {
      ::testing::InitGoogleTest(&argc, argv);
      return RUN_ALL_TESTS();
    }
  // Unpinned threads: the suite runs several processes at once on few cores.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  return RUN_ALL_TESTS();
}
