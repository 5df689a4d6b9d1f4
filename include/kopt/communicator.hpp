#pragma once
/// \file
/// kopt::Communicator: the narrow interface kopt's sharded step needs from a distributed
/// engine. kopt::MpiCommunicator (kopt/mpi_communicator.hpp, kopt_ENABLE_MPI) runs it on
/// MPI; SingleProcessCommunicator is the world of one. Buffers are host memory: groups in
/// device memory are staged through the host.

#include <cstddef>
#include <memory>
#include <vector>

namespace kopt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This process's rank, in [0, size()).
  virtual int rank() const = 0;
  /// Number of ranks (the data-parallel world).
  virtual int size() const = 0;
  /// Every rank contributes `bytes[rank()]` bytes from `in`; rank r's bytes land at `out` +
  /// bytes[0] + ... + bytes[r-1] on every rank. `bytes` is the same on every rank. Blocks.
  virtual void all_gather_bytes(const void* in, void* out,
                                const std::vector<std::size_t>& bytes) = 0;
  /// `in` holds size() blocks of `count` floats; rank r receives in `out` the element-wise
  /// sum over ranks of block r. Blocks.
  virtual void reduce_scatter_sum(const float* in, float* out, std::size_t count) = 0;
};

/// The world of one process: gathers and reductions are copies.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather_bytes(const void* in, void* out, const std::vector<std::size_t>& bytes) override;
  void reduce_scatter_sum(const float* in, float* out, std::size_t count) override;
};

namespace Impl {
/// The C interface's sharded optimizers' communicator: a kopt::MpiCommunicator on the MPI
/// communicator whose Fortran handle is `handle` (MPI_Comm_c2f), so that kopt.h needs no
/// mpi.h. Throws kopt::NotCompiled where kopt was built without MPI (kopt_ENABLE_MPI=OFF),
/// InvalidArgument when MPI is not initialized or the handle is MPI_COMM_NULL's.
std::shared_ptr<Communicator> mpi_communicator_of_handle(int handle);
}  // namespace Impl

}  // namespace kopt
