#!/usr/bin/env bash
# One command on a machine with an NVIDIA GPU: builds kopt for CUDA (or takes a build made
# elsewhere), runs the whole test suite with CUDA as Kokkos' default execution space (device
# and hybrid groups, offload over real copies, sharded runs under mpirun at 1-4 ranks), then
# the perf suite's GPU rows, and writes a summary that names the GPU.
#
# Usage: bash scripts/run-gpu.sh [--build-dir DIR]
#                                [--tests-only | --perf-only | --build-only | --compile-check]
#                                [--no-gpu-check] [--full | --smoke] [Google Benchmark flags]
#   --build-dir DIR  a tree already configured and built for CUDA (e.g. built on another machine
#                    and copied with its paths): nothing is built, it is run as it is
#   --tests-only, --perf-only   one half only
#   --build-only     build the whole tree for CUDA with -Werror and stop: no GPU needed (a tree
#                    to carry to a GPU machine)
#   --compile-check  the same, with the host half of each CUDA compile unoptimized where the
#                    compiler allows (the bootstrap's Clang: -Xarch_host -O0; the device half
#                    stays -O3, for sm_90 alone, and is inspected as always): what
#                    scripts/run-tests.sh runs in its third pass, so CI compiles every CUDA path
#                    (not the header check: kopt_TEST_HEADER_CHECK=OFF).
#                    Not for running: its host code is slow, and it has no sm_80 code. Clang's
#                    warnings do not depend on the optimization level.
#   --no-gpu-check   run even where nvidia-smi sees no GPU (to try the script itself against a
#                    host-only build: KOPT_GPU_SPACE=OpenMP)
#   --full, --smoke and --benchmark_* flags go to the perf suite (every size; tiny sizes)
# Kokkos: Kokkos_ROOT (or CMAKE_PREFIX_PATH) pointing at a CUDA-enabled Kokkos (CUDA 13 needs
# Kokkos >= 4.7.01; see docs/cuda-builds.md), built with its nvcc_wrapper (or CXX); else the
# bootstrap's CUDA build (scripts/bootstrap-deps.sh --with-cuda: Kokkos 3.4.01, Debian's CUDA
# 11.8 and Clang 16, machine code for sm_80 and sm_90: Ampere, Ada and Hopper GPUs).
# Env: KOPT_BUILD_DIR (default build/gpu), KOPT_GPU_SPACE (the perf rows' space, default Cuda).
# Results: $build/results-gpu/ (ctest.log, kopt_bench-gpu.json, summary.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${KOPT_BUILD_DIR:-build/gpu}" want_arch="" prebuilt=0 tests=1 perf=1 gpu_check=1
build_only=0 host_o0=0 bench_args=()
# The header check (each public header on its own) is a host build's: the compile check leaves
# it out (its 30 CUDA compiles took 170 s of the pass's 2,767 s of compiles on the 2-core VM).
header_check=ON
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$2" prebuilt=1; shift ;;
    --tests-only) perf=0 ;;
    --perf-only) tests=0 ;;
    --build-only) build_only=1 gpu_check=0 ;;
    --compile-check) build_only=1 gpu_check=0 host_o0=1 header_check=OFF ;;
    --no-gpu-check) gpu_check=0 ;;
    --full | --smoke | --benchmark_*) bench_args+=("$1") ;;
    *) echo "run-gpu.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
space="${KOPT_GPU_SPACE:-Cuda}"

gpu="none"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"
elif [ "$gpu_check" = 1 ]; then
  echo "run-gpu.sh: no NVIDIA GPU visible (nvidia-smi); --no-gpu-check runs anyway" >&2
  exit 1
fi
[ "$build_only" = 1 ] || echo "=== GPU: $gpu"

if [ "$prebuilt" = 0 ]; then
  if [ -n "${Kokkos_ROOT:-}${CMAKE_PREFIX_PATH:-}" ]; then
    # Your CUDA Kokkos: its nvcc_wrapper as the compiler (or CXX, e.g. a Clang it was built with).
    prefix_path="$(bash scripts/bootstrap-deps.sh --with-mpi | tail -n 1)"
    compiler="${CXX:-$(IFS=';'; for p in $prefix_path; do
      find "$p" -maxdepth 3 -path '*/bin/nvcc_wrapper' -print -quit 2>/dev/null; done | head -n 1)}"
    [ -n "$compiler" ] || { echo "run-gpu.sh: no nvcc_wrapper under $prefix_path; set CXX" >&2; exit 1; }
    toolchain=(-DCMAKE_CXX_COMPILER="$compiler")
    host_o0=0  # nvcc passes -O3 to the host compiler too: --compile-check builds as --build-only
  else
    # The bootstrap's CUDA Kokkos (Clang 16 + Debian's CUDA 11.8) and its toolchain file.
    prefix_path="$(bash scripts/bootstrap-deps.sh --with-mpi --with-cuda | tail -n 1)"
    toolchain=(-DCMAKE_TOOLCHAIN_FILE="$prefix_path/toolchain.cmake")
    want_arch=sm_90  # Kokkos 3.4 refuses to run its sm_80 code on Hopper (bootstrap-deps.sh)
    # The host half at -O0: a kernel file's compile 30-70% shorter (fused_openmp.cpp 178 ->
    # 65 s), a small test file's no shorter (docs/cuda-builds.md). Set either way: a tree
    # configured by one option and built again by the other follows it.
    release="-O3 -DNDEBUG" launcher=(-UCMAKE_CXX_COMPILER_LAUNCHER)  # yours, if any (ccache)
    if [ "$host_o0" = 1 ]; then
      release+=" -Xarch_host -O0"
      # One device half per file, sm_90's (the machine code inspected below): the launcher drops
      # Kokkos' --cuda-gpu-arch=sm_80 and the toolchain's compiler adds sm_90. A small test
      # file's compile 13 -> 8 s (docs/cuda-builds.md).
      mkdir -p "$build"
      arch_filter="$(cd "$build" && pwd)/sm90-only.sh"
      printf '%s\n' '#!/bin/sh' '# run-gpu.sh --compile-check: a CUDA compile for sm_90 alone.' \
        'for a; do shift; case "$a" in --cuda-gpu-arch=*) ;; *) set -- "$@" "$a" ;; esac; done' \
        'exec "$@"' >"$arch_filter"
      chmod +x "$arch_filter"
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$arch_filter")
    fi
    toolchain+=(-DCMAKE_CXX_FLAGS_RELEASE="$release" "${launcher[@]}")
  fi
  echo "=== building for CUDA in $build (${toolchain[*]})"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
    "${toolchain[@]}" -Dkopt_ENABLE_TESTS=ON -Dkopt_ENABLE_EXAMPLES=ON \
    -Dkopt_ENABLE_BENCHMARKS=ON -Dkopt_ENABLE_WERROR=ON -Dkopt_ENABLE_MPI=ON \
    -Dkopt_TEST_HEADER_CHECK="${header_check}"
  # The spaces kopt compiles for come from the Kokkos it found: make sure Cuda is one of them.
  grep -q 'Kokkos::Cuda' "$build/include/kopt/impl/backends.hpp" || {
    echo "run-gpu.sh: the Kokkos found ($prefix_path) has no Cuda backend" >&2
    exit 1
  }
  cmake --build "$build" -j "$(nproc)"
fi

# Two faults that only a GPU showed (docs/gpu-results.md), checked on the compiled code so
# that CI, which has no GPU, catches them: an approximate float instruction in kopt's device
# code (a device step would part from the host's bits: -ffp-contract=off keeps the rest
# IEEE), and a build of the bootstrap's Kokkos 3.4 without sm_90 machine code.
lib="$(find "$build" -maxdepth 1 -name 'libkopt.*' | head -n 1)"
if ! command -v cuobjdump >/dev/null; then
  echo "run-gpu.sh: no cuobjdump on PATH: kopt's device code not inspected" >&2
elif [ -n "$lib" ]; then
  approx="$(cuobjdump --dump-ptx "$lib" | grep -oE '\b[a-z0-9]+\.approx[.a-z0-9]*' | sort | uniq -c || true)"
  [ -z "$approx" ] || {
    echo "run-gpu.sh: approximate instructions in kopt's device code ($lib):" >&2
    echo "$approx" >&2
    exit 1
  }
  # (grep reads it all: -q would stop early, and pipefail would take cuobjdump's SIGPIPE.)
  if [ -n "${want_arch:-}" ] && ! cuobjdump --list-elf "$lib" | grep "\.$want_arch\." >/dev/null; then
    echo "run-gpu.sh: no $want_arch machine code in $lib" >&2
    exit 1
  fi
  echo "=== device code: no approximate float instructions${want_arch:+, $want_arch machine code present}"
fi
if [ "$build_only" = 1 ]; then
  opt=""; [ "$host_o0" = 0 ] || opt=", host code at -O0"
  echo "=== built for CUDA in $build (-Werror$opt): not run"
  exit 0
fi
results="$build/results-gpu"
mkdir -p "$results"
rm -f "$results/summary.txt" "$results/perf.txt"
status=0

if [ "$tests" = 1 ]; then
  echo "=== the test suite (ctest; CUDA is the default space of a CUDA build)"
  # Several test processes share the one GPU (each a CUDA context); 8 at most, as the MPI tests
  # ask for up to 4 processors each.
  jobs=$(nproc); [ "$jobs" -gt 8 ] && jobs=8
  (cd "$build" && ctest --output-on-failure -j "$jobs") 2>&1 | tee "$results/ctest.log" || status=1
fi

if [ "$perf" = 1 ]; then
  # The rows on the GPU: the fused update of every variant beside the device-to-device copy
  # (its ceiling), bf16/fp16 masters, 100,000 tiny tensors in one launch (adamw_*_split), the
  # offload pipeline (overlap; tiny params batched), the host + device hybrid step.
  bench="$build/perf/kopt_bench"
  filter="/${space}(/|$)"
  echo "=== kopt_bench rows on $space: $("$bench" "${bench_args[@]}" \
    --benchmark_filter="$filter" --benchmark_list_tests | wc -l)"
  OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}" \
    KOPT_GIT_REVISION="$(git describe --always --dirty 2>/dev/null || echo unknown)" \
    "$bench" "${bench_args[@]}" --benchmark_filter="$filter" --benchmark_out="$results/kopt_bench-gpu.json" \
    --benchmark_out_format=json --benchmark_color=false || status=1
  python3 scripts/perf-report.py "$results/kopt_bench-gpu.json" > "$results/perf.txt" || status=1
fi

{
  echo "GPU: $gpu"
  echo "git: $(git describe --always --dirty 2>/dev/null || echo unknown)"
  if [ "$tests" = 1 ]; then grep -E "tests passed|tests failed" "$results/ctest.log" || true; fi
  if [ -f "$results/perf.txt" ]; then cat "$results/perf.txt"; fi
} > "$results/summary.txt"
echo
cat "$results/summary.txt"
echo "Results: $results/ (exit $status)"
exit "$status"
