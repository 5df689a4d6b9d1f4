#!/usr/bin/env bash
# Builds kopt with its tests, examples, benchmarks and MPI support, and runs every test
# (CTest; the MPI tests under mpirun at 1 to 4 ranks); then the tests again built with
# AddressSanitizer + UndefinedBehaviorSanitizer; then compiles the whole tree for CUDA (no GPU
# needed: scripts/run-gpu.sh --compile-check).
# Installs what it needs first (scripts/bootstrap-deps.sh). Usage: bash scripts/run-tests.sh
# Env: KOPT_BUILD_DIR (default: build/tests; the sanitizer build goes to <it>-asan, the CUDA
# build to <it>-cuda), KOPT_DEPS_PREFIX (see bootstrap-deps.sh), KOPT_SANITIZERS=0 (skip the
# second pass), KOPT_CUDA_BUILD=0 (skip the third; =1 runs it with your own Kokkos too).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
prefix_path="$(bash scripts/bootstrap-deps.sh --with-mpi | tail -n 1)"
build="${KOPT_BUILD_DIR:-build/tests}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -Dkopt_ENABLE_TESTS=ON -Dkopt_ENABLE_EXAMPLES=ON -Dkopt_ENABLE_BENCHMARKS=ON \
  -Dkopt_ENABLE_WERROR=ON -Dkopt_ENABLE_NATIVE=ON -Dkopt_ENABLE_MPI=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"

# A second pass built with AddressSanitizer + UndefinedBehaviorSanitizer (tests only; not
# the install test, which links an uninstrumented consumer, nor the fuzz test, which has
# its own sanitizers, nor the whole suite again at 2 and 4 threads: the first pass runs those;
# the OpenMP kernels' tests at 2 threads, OpenMPKernels.Threads2, run here too, so that the
# sanitizers see the work split over threads: 72 s, where the whole suite took 319 s).
# OpenMPI leaks at exit: leak checks are off for the MPI tests only.
# KOPT_SANITIZERS=0 skips this pass.
if [ "${KOPT_SANITIZERS:-1}" != 0 ]; then
  cd - >/dev/null
  asan="${build}-asan"
  flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  # -O1 -g1 (line tables; asserts on): half the compile time of -O2 -g for the kernel files
  # (measured: 184 s against 383 s for fused_serial.cpp), with file:line in every report.
  # The host space's device paths, which only the tests take, compile at -O0 and without
  # UBSan here (ASan kept) and at -O0 in the first pass (CMakeLists.txt: 783 -> 219 + 148 s).
  # GCC's -Wmaybe-uninitialized is unreliable under -fsanitize at -O1 (false positives inside
  # std::variant); the first pass keeps it, with -Werror.
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix_path" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -Dkopt_ENABLE_TESTS=ON -Dkopt_ENABLE_WERROR=ON -Dkopt_ENABLE_MPI=ON \
    -Dkopt_TEST_HEADER_CHECK=OFF \
    -DCMAKE_CXX_FLAGS="$flags -Wno-maybe-uninitialized" -DCMAKE_C_FLAGS="$flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags"
  cmake --build "$asan" -j "$(nproc)"
  cd "$asan"
  echo "=== the test suite again, under AddressSanitizer + UndefinedBehaviorSanitizer"
  ctest --output-on-failure -j "$(nproc)" -E "InstallTest|Fuzz|MPI|AllTests"
  ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j "$(nproc)" -R "MPI"
fi

# A third pass: the library, tests, benchmarks and examples compiled for CUDA with -Werror, so
# every device path compiles on every run, GPU or not (scripts/run-gpu.sh --compile-check: the
# bootstrap's Kokkos 3.4.01 with Cuda, Debian's CUDA 11.8 and Clang 16; docs/cuda-builds.md).
# Nothing runs: scripts/run-gpu.sh runs it all on a GPU. With your own Kokkos (found through
# Kokkos_ROOT or CMAKE_PREFIX_PATH) it is skipped unless KOPT_CUDA_BUILD=1 (run-gpu.sh then
# uses that Kokkos with its nvcc_wrapper or CXX).
cd "$root"
deps_prefix="${KOPT_DEPS_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/kopt-deps}"
cuda_build="${KOPT_CUDA_BUILD:-auto}"
if [ "$cuda_build" = 0 ]; then
  echo "=== the CUDA compile pass skipped (KOPT_CUDA_BUILD=0)"
elif [ "$prefix_path" = "$deps_prefix" ]; then
  echo "=== the whole tree again, compiled for CUDA (-Werror; nothing is run)"
  env -u Kokkos_ROOT -u CMAKE_PREFIX_PATH KOPT_BUILD_DIR="${build}-cuda" \
    bash scripts/run-gpu.sh --compile-check
elif [ "$cuda_build" = 1 ]; then
  echo "=== the whole tree again, compiled for CUDA with your Kokkos (-Werror; nothing is run)"
  KOPT_BUILD_DIR="${build}-cuda" bash scripts/run-gpu.sh --compile-check
else
  echo "=== the CUDA compile pass skipped: your own Kokkos is in use (KOPT_CUDA_BUILD=1 runs it)"
fi
