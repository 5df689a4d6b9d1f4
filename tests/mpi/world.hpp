#pragma once
// MPI_COMM_WORLD as the MPI tests see it: this rank, the world size, and options sharded
// over it.
#include <mpi.h>

#include <kopt/kopt.hpp>
#include <kopt/mpi_communicator.hpp>
#include <memory>

namespace kopt_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// `options` sharded over MPI_COMM_WORLD at `stage`, grads reduced by `reduction`.
inline kopt::HybridOptions sharded(kopt::HybridOptions options, kopt::ZeroStage stage,
                                   kopt::GradReduction reduction = kopt::GradReduction::sum) {
  options.sharding = kopt::ShardingOptions{std::make_shared<kopt::MpiCommunicator>(MPI_COMM_WORLD),
                                           stage, reduction};
  return options;
}

}  // namespace kopt_test
