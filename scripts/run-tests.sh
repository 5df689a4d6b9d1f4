#!/usr/bin/env bash
# Builds kopt with its tests, examples, benchmarks and MPI support, and runs every test
# (CTest; the MPI tests under mpirun at 1 to 4 ranks).
# Installs what it needs first (scripts/bootstrap-deps.sh). Usage: bash scripts/run-tests.sh
# Env: KOPT_BUILD_DIR (default: build/tests), KOPT_DEPS_PREFIX (see bootstrap-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix_path="$(bash scripts/bootstrap-deps.sh --with-mpi | tail -n 1)"
build="${KOPT_BUILD_DIR:-build/tests}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -Dkopt_ENABLE_TESTS=ON -Dkopt_ENABLE_EXAMPLES=ON -Dkopt_ENABLE_BENCHMARKS=ON \
  -Dkopt_ENABLE_WERROR=ON -Dkopt_ENABLE_NATIVE=ON -Dkopt_ENABLE_MPI=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
