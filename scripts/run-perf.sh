#!/usr/bin/env bash
# The main job: builds kopt's perf suite (Release, -march=native) and runs it on every
# backend Kokkos enables, at 1 thread and at every hardware thread. Each row gives the rate
# (Gelem/s, GB/s at 28 B/element), the memory ceiling for the same access pattern measured
# in the same run (ceil_GB/s), and the fraction of it reached (of_ceiling).
# Installs what it needs first. Usage: bash scripts/run-perf.sh [extra Google Benchmark flags]
# Env: KOPT_BUILD_DIR (default: build/perf); results also land in $KOPT_BUILD_DIR/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix_path="$(bash scripts/bootstrap-deps.sh | tail -n 1)"
build="${KOPT_BUILD_DIR:-build/perf}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -Dkopt_ENABLE_BENCHMARKS=ON -Dkopt_ENABLE_NATIVE=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target kopt_bench
mkdir -p "$build/results"
for threads in 1 "$(nproc)"; do
  echo "=== kopt perf suite: OMP_NUM_THREADS=$threads, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS="$threads" OMP_PROC_BIND=spread OMP_PLACES=threads \
    "$build/perf/kopt_bench" --benchmark_counters_tabular=true \
    --benchmark_out="$build/results/threads$threads.json" --benchmark_out_format=json "$@"
  [ "$threads" = "$(nproc)" ] && break
done
