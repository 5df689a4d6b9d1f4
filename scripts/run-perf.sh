#!/usr/bin/env bash
# The main job: builds kopt's perf suite (Release, -march=native) and runs it on every backend
# Kokkos enables, then the sharded step under mpirun at 1, 2 and 4 ranks. Prints progress, then
# a compact table (kernel, backend, size, GB/s, fraction of the ceiling of its own access
# pattern measured in the same run, ratio to each peer); the full Google Benchmark JSON files
# land in $KOPT_BUILD_DIR/results/. Installs what it needs first.
#
# Usage: bash scripts/run-perf.sh [--full] [--with-libtorch] [--plot] [Google Benchmark flags]
#   --full           every size (2^16..2^26) and variant, the suite also at 1 thread
#   --with-libtorch  install Debian's libtorch-dev (once) and measure its AdamW as a peer
#   --plot           also write results/bandwidth.png (installs gnuplot-nox)
# Env: KOPT_BUILD_DIR (default: build/perf); OMP_NUM_THREADS (default: every hardware thread),
# OMP_PROC_BIND (default: spread), OMP_PLACES (default: threads).
set -euo pipefail
cd "$(dirname "$0")/.."
full=0 plot=0 deps=(--with-mpi) bench_args=()
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    --with-libtorch) deps+=(--with-libtorch) ;;
    --plot) plot=1 deps+=(--with-plot) ;;
    *) bench_args+=("$arg") ;;
  esac
done
[ "$full" = 1 ] && bench_args+=(--full)

prefix_path="$(bash scripts/bootstrap-deps.sh "${deps[@]}" | tail -n 1)"
build="${KOPT_BUILD_DIR:-build/perf}"
echo "=== building the perf suite in $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -Dkopt_ENABLE_BENCHMARKS=ON -Dkopt_ENABLE_NATIVE=ON -Dkopt_ENABLE_MPI=ON | grep "perf suite" || true
cmake --build "$build" -j "$(nproc)" --target kopt_bench kopt_bench_mpi
results="$build/results"
mkdir -p "$results"
rm -f "$results"/*.json

export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}"
export KOPT_GIT_REVISION="$(git describe --always --dirty 2>/dev/null || echo unknown)"
all_threads="${OMP_NUM_THREADS:-$(nproc)}"

# Runs a perf binary, printing one progress line per finished row; $1: rows expected.
run_rows() {
  local expected="$1" done=0
  shift
  "$@" --benchmark_format=console 2>&1 | while IFS= read -r line; do
    case "$line" in
      */manual_time*)
        done=$((done + 1))
        printf '  [%d/%d] %s\n' "$done" "$expected" "$(awk '{print $1, $2, $3}' <<<"$line")" ;;
      *rror*|*RROR*) echo "  $line" ;;
    esac
  done
}

threads_list=("$all_threads")
[ "$full" = 1 ] && [ "$all_threads" != 1 ] && threads_list=(1 "$all_threads")
for threads in "${threads_list[@]}"; do
  rows="$(OMP_NUM_THREADS="$threads" "$build/perf/kopt_bench" "${bench_args[@]}" --benchmark_list_tests | wc -l)"
  echo "=== kopt_bench: $rows rows, OMP_NUM_THREADS=$threads OMP_PROC_BIND=$OMP_PROC_BIND" \
    "OMP_PLACES=$OMP_PLACES, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS="$threads" run_rows "$rows" "$build/perf/kopt_bench" "${bench_args[@]}" \
    --benchmark_out="$results/kopt_bench-${threads}t.json" --benchmark_out_format=json
done

# One OpenMP thread per rank, so 1 and 2 ranks use the cores a 2-core machine has; 4 ranks
# oversubscribe it. OpenMPI may need to oversubscribe and to run as root (containers).
mpi_env=(OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_btl_vader_single_copy_mechanism=none)
for ranks in 1 2 4; do
  rows="$(env "${mpi_env[@]}" "$build/perf/kopt_bench_mpi" "${bench_args[@]}" --benchmark_list_tests | wc -l)"
  echo "=== kopt_bench_mpi: $rows rows at $ranks MPI ranks, 1 thread each"
  (
    export "${mpi_env[@]}"
    run_rows "$rows" mpirun -np "$ranks" "$build/perf/kopt_bench_mpi" "${bench_args[@]}" \
      --benchmark_out="$results/sharded-${ranks}ranks.json" --benchmark_out_format=json
  )
done

python3 scripts/perf-report.py "$results"/kopt_bench-*.json "$results"/sharded-*.json |
  tee "$results/summary.txt"
echo
echo "Full results (Google Benchmark JSON): $results/*.json; this table: $results/summary.txt"
if [ "$plot" = 1 ]; then
  python3 scripts/plot-perf.py "$results/kopt_bench-${all_threads}t.json" "$results/bandwidth.png"
else
  echo "Plot: python3 scripts/plot-perf.py $results/kopt_bench-${all_threads}t.json out.png (gnuplot)"
fi
