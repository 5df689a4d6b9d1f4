#pragma once
/// \file
/// What this build of kopt can run on.

#include <string>
#include <vector>

namespace kopt {

/// Names of the Kokkos execution spaces this build instantiated kopt's kernels for, in the
/// order "Serial", "OpenMP", "Cuda" (those enabled). Does not block.
std::vector<std::string> enabled_spaces();

/// "kopt 0.1.0 (Kokkos 3.4.1: Serial OpenMP)" for logs and benchmark contexts.
std::string build_info();

}  // namespace kopt
