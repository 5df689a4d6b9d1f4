#pragma once
// A directory name all ranks share (this machine's temporary directory), removed at the end.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

namespace kopt_test {

// A directory all ranks share (this machine's temporary directory), removed at the end.
struct SharedDir {
  std::string path;
  SharedDir() {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char buf[256] = {};
    if (rank == 0) {
      const auto p = std::filesystem::temp_directory_path() /
                     ("kopt-mpi-" + std::to_string(std::random_device{}()));
      std::snprintf(buf, sizeof(buf), "%s", p.string().c_str());
    }
    MPI_Bcast(buf, sizeof(buf), MPI_CHAR, 0, MPI_COMM_WORLD);
    path = buf;
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::error_code ec;
    if (rank == 0) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace kopt_test
