#!/usr/bin/env bash
# The main job: builds kopt's perf suite (Release, -march=native) and runs it on every backend
# Kokkos enables, then the sharded step under mpirun at 1, 2 and 4 ranks. Prints progress, then
# a compact table (kernel, backend, size, GB/s, fraction of the ceiling of its own access
# pattern measured in the same run, ratio to each peer); the full Google Benchmark JSON files
# land in $KOPT_BUILD_DIR/results/. Installs what it needs first.
#
# Usage: bash scripts/run-perf.sh [--full] [--with-libtorch] [--with-peers] [--plot]
#                                 [Google Benchmark flags]
#   --full           every size (2^16..2^26) and variant, the suite also at 1 thread
#   --with-libtorch  install Debian's libtorch-dev (once) and measure its AdamW as a peer
#   --with-peers     install torch and DeepSpeed from PyPI (once) and, after the suite, run
#                    interleaved rounds of kopt's peer configs and perf/peers.py at 1 and 2
#                    threads (scripts/run-peer-rounds.sh): "x DeepSpeed", "x torch fused" columns
#   --plot           also write results/bandwidth.png (installs gnuplot-nox)
# Env: KOPT_BUILD_DIR (default: build/perf); OMP_NUM_THREADS (default: every hardware thread),
# OMP_PROC_BIND (default: spread), OMP_PLACES (default: threads); KOPT_PEER_ROUNDS (default 3);
# KOPT_PERF_BIN_DIR: a folder holding already built kopt_bench and kopt_bench_mpi to run instead
# of building (testing the scripts; results still go to $KOPT_BUILD_DIR/results).
set -euo pipefail
cd "$(dirname "$0")/.."
full=0 plot=0 peers=0 deps=(--with-mpi) bench_args=()
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    --with-libtorch) deps+=(--with-libtorch) ;;
    --plot) plot=1 deps+=(--with-plot) ;;
    --with-peers) peers=1 deps+=(--with-peers) ;;
    *) bench_args+=("$arg") ;;
  esac
done
[ "$full" = 1 ] && bench_args+=(--full)

prefix_path="$(bash scripts/bootstrap-deps.sh "${deps[@]}" | tail -n 1)"
build="${KOPT_BUILD_DIR:-build/perf}"
bin="${KOPT_PERF_BIN_DIR:-$build/perf}"
if [ -n "${KOPT_PERF_BIN_DIR:-}" ]; then
  echo "=== using the perf binaries in $bin (KOPT_PERF_BIN_DIR), building nothing"
else
  echo "=== building the perf suite in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
    -Dkopt_ENABLE_BENCHMARKS=ON -Dkopt_ENABLE_NATIVE=ON -Dkopt_ENABLE_MPI=ON |
    grep "perf suite" || true
  cmake --build "$build" -j "$(nproc)" --target kopt_bench kopt_bench_mpi
fi
results="$build/results"
mkdir -p "$results"
rm -rf "$results"/*.json "$results/peers"

export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}" OMP_PLACES="${OMP_PLACES:-threads}"
export KOPT_GIT_REVISION="$(git describe --always --dirty 2>/dev/null || echo unknown)"
all_threads="${OMP_NUM_THREADS:-$(nproc)}"

# Runs a perf binary, printing one progress line per finished row; $1: rows expected. No colour:
# under mpirun a rank's stdout is a terminal, so Google Benchmark would colour it; any escape
# sequence that gets through anyway is stripped.
run_rows() {
  local expected="$1" done=0
  shift
  "$@" --benchmark_format=console --benchmark_color=false 2>&1 |
    sed -u 's/\x1b\[[0-9;]*[A-Za-z]//g' | while IFS= read -r line; do
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
  rows="$(OMP_NUM_THREADS="$threads" "$bin/kopt_bench" "${bench_args[@]}" --benchmark_list_tests | wc -l)"
  echo "=== kopt_bench: $rows rows, OMP_NUM_THREADS=$threads OMP_PROC_BIND=$OMP_PROC_BIND" \
    "OMP_PLACES=$OMP_PLACES, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  OMP_NUM_THREADS="$threads" run_rows "$rows" "$bin/kopt_bench" "${bench_args[@]}" \
    --benchmark_out="$results/kopt_bench-${threads}t.json" --benchmark_out_format=json
done

# One OpenMP thread per rank, so 1 and 2 ranks use the cores a 2-core machine has; 4 ranks
# oversubscribe it. OpenMPI may need to oversubscribe and to run as root (containers).
mpi_env=(OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_btl_vader_single_copy_mechanism=none)
for ranks in 1 2 4; do
  rows="$(env "${mpi_env[@]}" "$bin/kopt_bench_mpi" "${bench_args[@]}" --benchmark_list_tests | wc -l)"
  echo "=== kopt_bench_mpi: $rows rows at $ranks MPI ranks, 1 thread each"
  (
    export "${mpi_env[@]}"
    run_rows "$rows" mpirun -np "$ranks" "$bin/kopt_bench_mpi" "${bench_args[@]}" \
      --benchmark_out="$results/sharded-${ranks}ranks.json" --benchmark_out_format=json
  )
done

peer_files=()
if [ "$peers" = 1 ]; then
  peers_python="$(bash scripts/bootstrap-peers.sh | tail -n 1)"
  echo "=== peers: ${KOPT_PEER_ROUNDS:-3} rounds of kopt_bench (peer configs only) and" \
    "perf/peers.py (torch AdamW fused and foreach, DeepSpeedCPUAdam) at 1 and 2 threads," \
    "each a separate process, in shuffled order"
  bash scripts/run-peer-rounds.sh "$bin/kopt_bench" "$peers_python" "$results" "${bench_args[@]}"
  shopt -s nullglob  # rounds that all failed leave no file: the report then has no peers
  peer_files=(--peers "$results"/peers/*.json)
  shopt -u nullglob
fi

python3 scripts/perf-report.py "$results"/kopt_bench-*.json "$results"/sharded-*.json \
  "${peer_files[@]}" | tee "$results/summary.txt"
echo
echo "Full results (Google Benchmark JSON): $results/*.json; this table: $results/summary.txt"
if [ "$plot" = 1 ]; then
  python3 scripts/plot-perf.py "$results/kopt_bench-${all_threads}t.json" "$results/bandwidth.png"
else
  echo "Plot: python3 scripts/plot-perf.py $results/kopt_bench-${all_threads}t.json out.png (gnuplot)"
fi
