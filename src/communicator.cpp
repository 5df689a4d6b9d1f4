#include <cstring>
#include <kopt/communicator.hpp>
#include <kopt/error.hpp>

namespace kopt {

void SingleProcessCommunicator::all_gather_bytes(const void* in, void* out,
                                                 const std::vector<std::size_t>& bytes) {
  KOPT_THROW_IF(bytes.size() != 1, "kopt::SingleProcessCommunicator: all_gather_bytes got "
                                       << bytes.size() << " counts for a world of 1");
  if (bytes[0] > 0) std::memmove(out, in, bytes[0]);
}

void SingleProcessCommunicator::reduce_scatter_sum(const float* in, float* out, std::size_t count) {
  if (count > 0) std::memmove(out, in, count * sizeof(float));
}

#ifndef KOPT_WITH_MPI
std::shared_ptr<Communicator> Impl::mpi_communicator_of_handle(int) {
  throw NotCompiled(
      error_message("kopt: this kopt was built without MPI (kopt_ENABLE_MPI=OFF): "
                    "no sharding over an MPI communicator",
                    __FILE__, __LINE__));
}
#endif

}  // namespace kopt
