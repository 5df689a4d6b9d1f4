// MPI test entry point: MPI and Kokkos live for the whole run. CTest runs this binary under
// mpirun at 1, 2, 3 and 4 ranks; every rank runs every test, and a failure on any rank
// fails the run. Only rank 0 prints the progress lines.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>

namespace {
// On ranks other than 0: only failures, each naming the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);  // several ranks share few cores
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    failed = RUN_ALL_TESTS();
  }
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any != 0) std::fprintf(stderr, "kopt_mpi_tests: a rank failed\n");
  MPI_Finalize();
  return any;
}
