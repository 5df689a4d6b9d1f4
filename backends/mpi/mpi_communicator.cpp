// kopt::Communicator on MPI. Counts above what an MPI int holds are split into pieces.
#include <algorithm>
#include <climits>
#include <cstring>
#include <kopt/error.hpp>
#include <kopt/mpi_communicator.hpp>
#include <numeric>
#include <string>

namespace kopt {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  KOPT_THROW_IF_AS(BackendError, true,
                   "kopt::MpiCommunicator: " << what << " failed: " << std::string(text, len));
}
constexpr std::size_t kPiece = std::size_t{1} << 30;  // bytes per MPI call in the fallback
}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  KOPT_THROW_IF(!initialized,
                "kopt::MpiCommunicator: MPI is not initialized (call MPI_Init first)");
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

std::shared_ptr<Communicator> Impl::mpi_communicator_of_handle(int handle) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  KOPT_THROW_IF(!initialized || finalized,
                "kopt: MPI is not initialized (call MPI_Init first), or already finalized");
  const MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  KOPT_THROW_IF(comm == MPI_COMM_NULL,
                "kopt: MPI communicator handle " << handle << " is MPI_COMM_NULL's");
  // A handle of no communicator is reported to MPI_COMM_WORLD's or MPI_COMM_SELF's error
  // handler (by MPI version), fatal by default: asked with both returning codes, its size
  // tells (a local call, nothing else changes), and the code's handlers are put back.
  MPI_Errhandler world = MPI_ERRHANDLER_NULL, self = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world);
  MPI_Comm_get_errhandler(MPI_COMM_SELF, &self);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  int size = 0;
  const int rc = MPI_Comm_size(comm, &size);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, self);
  MPI_Errhandler_free(&world);
  MPI_Errhandler_free(&self);
  KOPT_THROW_IF(rc != MPI_SUCCESS,
                "kopt: MPI communicator handle " << handle << " is not a communicator's");
  return std::make_shared<MpiCommunicator>(comm);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::all_gather_bytes(const void* in, void* out,
                                       const std::vector<std::size_t>& bytes) {
  KOPT_THROW_IF(bytes.size() != static_cast<std::size_t>(size_),
                "kopt::MpiCommunicator: all_gather_bytes got "
                    << bytes.size() << " counts for a world of " << size_);
  const std::size_t total = std::accumulate(bytes.begin(), bytes.end(), std::size_t{0});
  if (total <= static_cast<std::size_t>(INT_MAX)) {
    std::vector<int> counts(bytes.begin(), bytes.end()), displs(bytes.size(), 0);
    for (std::size_t r = 1; r < bytes.size(); ++r) displs[r] = displs[r - 1] + counts[r - 1];
    check(MPI_Allgatherv(in, counts[static_cast<std::size_t>(rank_)], MPI_BYTE, out, counts.data(),
                         displs.data(), MPI_BYTE, comm_),
          "MPI_Allgatherv");
    return;
  }
  auto* dst = static_cast<unsigned char*>(out);
  std::size_t at = 0;
  for (int r = 0; r < size_; ++r) {
    const std::size_t n = bytes[static_cast<std::size_t>(r)];
    if (r == rank_ && n > 0) std::memmove(dst + at, in, n);
    for (std::size_t done = 0; done < n; done += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, n - done));
      check(MPI_Bcast(dst + at + done, piece, MPI_BYTE, r, comm_), "MPI_Bcast");
    }
    at += n;
  }
}

void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, std::size_t count) {
  KOPT_THROW_IF(count > static_cast<std::size_t>(INT_MAX),
                "kopt::MpiCommunicator: reduce_scatter_sum of " << count << " floats per rank "
                                                                << "exceeds MPI's int count; "
                                                                << "split the group");
  check(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
        "MPI_Reduce_scatter_block");
}

}  // namespace kopt
