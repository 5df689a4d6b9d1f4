#pragma once
/// \file
/// kopt::MpiCommunicator: kopt::Communicator on MPI (kopt_ENABLE_MPI). Include it only in
/// code built with MPI; kopt's other headers never include mpi.h.

#include <mpi.h>

#include <kopt/communicator.hpp>

namespace kopt {

class MpiCommunicator final : public Communicator {
 public:
  /// Works on a duplicate of `comm` (MPI_Comm_dup, collective over `comm`), so kopt's
  /// messages never match the caller's; MPI errors on it throw kopt::BackendError. MPI must
  /// be initialized, and still be when this is destroyed.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  /// MPI_Allgatherv; above 2 GiB in all, one MPI_Bcast per rank in pieces of 1 GiB.
  void all_gather_bytes(const void* in, void* out, const std::vector<std::size_t>& bytes) override;
  /// MPI_Reduce_scatter_block (MPI_FLOAT, MPI_SUM): the order of the sum is MPI's.
  void reduce_scatter_sum(const float* in, float* out, std::size_t count) override;
  MPI_Comm comm() const { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace kopt
